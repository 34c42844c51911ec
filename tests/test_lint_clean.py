"""rtl_gen.lint_clean: the Verilog it writes lints clean and computes what Amaranth's design computes.

A small component holds every pattern the clean-up rewrites (a rounded sum whose low bits are dropped,
comparisons and logic operators of mixed widths, a right shift into a narrower signal, a submodule
input nothing reads, a struct read field by field, a case table). Its cleaned Verilog must lint with no warning but
DECLFILENAME, and Yosys must prove it equivalent to the RTLIL Amaranth wrote (``equiv_make`` /
``equiv_induct``). The LUT unit, a real engine, must prove equivalent too.
"""

import subprocess
import sys
from pathlib import Path

from amaranth.back import rtlil
from amaranth.hdl import Cat, Module, signed, unsigned
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out
from pyosys import libyosys as ys

from hw.params import preset
from rtl_gen import lint_clean
from rtl_gen.emit import block
from rtl_gen.stable_names import renumber


class _Piped(wiring.Component):
    """A pipeline stage whose ``i_valid`` its parent drives but nothing inside reads."""

    a: In(8)
    i_valid: In(1)
    y: Out(8)

    def elaborate(self, platform):
        m = Module()
        m.d.sync += self.y.eq(self.a + 3)
        return m


class _Patterns(wiring.Component):
    x: In(signed(20))
    k: In(unsigned(9))
    sh: In(unsigned(5))
    pair: In(data.StructLayout({"lo": unsigned(6), "hi": signed(10)}))
    rounded: Out(signed(8))
    flags: Out(4)
    part: Out(6)
    piped: Out(8)
    picked: Out(10)

    def elaborate(self, platform):
        m = Module()
        m.submodules.stage = stage = _Piped()
        m.d.comb += [
            self.rounded.eq((self.x * 5 + (1 << 11)) >> 12),            # low bits of the sum dropped
            self.flags.eq(Cat((self.x < self.k) | (~self.sh).any(),        # mixed-width compare, reduce
                              ~self.k.bool(), self.pair.hi > -3, self.pair.lo == 7)),
            self.part.eq(self.x.as_unsigned() >> self.sh),                  # right shift, narrower result
            stage.a.eq(self.pair.lo + self.k[:4]), stage.i_valid.eq(self.k[8]),
            self.piped.eq(stage.y),
        ]
        return m


YOSYS_SCRIPT = "from pyosys import libyosys as ys; import sys; ys.run_pass('script ' + sys.argv[1], ys.Design())"


def _proves_equivalent(component, top: str, tmp: Path) -> None:
    """Yosys proves Amaranth's RTLIL (gold) and the cleaned Verilog (gate) equivalent, both flattened. Gold gets
    the clean-up's renumbering of generated names (rtl_gen.stable_names, names only; tests/test_stable_names.py
    checks that instances follow), as ``equiv_make`` pairs the two designs' signals by name."""
    il = rtlil.convert(component, name=top, emit_src=False)
    (tmp / "amaranth.il").write_text(il)
    gold = ys.Design()
    ys.run_pass(f"tee -q read_rtlil {tmp / 'amaranth.il'}", gold)
    ys.run_pass("tee -q proc", gold)
    renumber(gold)
    ys.run_pass(f"tee -q write_rtlil {tmp / 'gold.il'}", gold)
    (tmp / "gate.v").write_text(lint_clean.to_verilog(il, top))
    (tmp / "stubs.v").write_text(lint_clean.MACRO_STUBS)
    script = tmp / "equiv.ys"
    script.write_text("\n".join([
        f"read_verilog -lib {tmp / 'stubs.v'}", f"read_rtlil {tmp / 'gold.il'}", "proc",
        f"hierarchy -top {top}", "flatten", f"rename {top} gold", "design -stash gold",
        f"read_verilog -lib {tmp / 'stubs.v'}", f"read_verilog {tmp / 'gate.v'}", "proc",
        f"hierarchy -top {top}", "flatten", f"rename {top} gate", "design -stash gate",
        f"read_verilog -lib {tmp / 'stubs.v'}",
        "design -copy-from gold -as gold gold", "design -copy-from gate -as gate gate",
        "async2sync", "equiv_make gold gate equiv", "hierarchy -top equiv", "equiv_simple -seq 2",
        "equiv_induct -seq 2", "equiv_status -assert", ""]))
    proc = subprocess.run([sys.executable, "-c", YOSYS_SCRIPT, str(script)], capture_output=True, text=True)
    tail = "\n".join(proc.stdout.splitlines()[-25:])
    assert proc.returncode == 0 and "Equivalence successfully proven" in proc.stdout, tail


def test_patterns_lint_clean_and_equivalent(tmp_path):
    from verification.runner import lint
    v = lint_clean.to_verilog(rtlil.convert(_Patterns(), name="patterns", emit_src=False), "patterns")
    assert [ln for ln in v.splitlines() if ln.startswith("module")][0].startswith("module patterns(")
    src = tmp_path / "patterns.v"
    src.write_text(v)
    result = lint([src], "patterns", cwd=tmp_path)
    assert result.errors == 0 and set(result.by_rule) <= {"Warning-DECLFILENAME"}, result.output
    assert "initial" not in v and "casez" not in v and "case" not in v
    _proves_equivalent(_Patterns(), "patterns", tmp_path)


def test_lut_unit_equivalent(tmp_path):
    blk = block("lut_unit")
    _proves_equivalent(blk.build(preset("tiny")), blk.top, tmp_path)


def test_the_same_rtlil_gives_the_same_verilog_in_one_process(tmp_path):
    """The KDA engine (ci) cleaned twice in this process, another design read by Yosys here between the two: the
    same text (in-process Yosys gave 179,856 and 170,876 characters, its name table changed by earlier designs)."""
    blk = block("kda_engine")
    il = rtlil.convert(blk.build(preset("ci")), name=blk.top, emit_src=False)
    first = lint_clean.to_verilog(il, blk.top)
    (tmp_path / "piped.il").write_text(rtlil.convert(_Piped(), name="piped", emit_src=False))
    other = ys.Design()
    ys.run_pass(f"tee -q read_rtlil {tmp_path / 'piped.il'}", other)
    lint_clean.clean(other)
    assert lint_clean.to_verilog(il, blk.top) == first
