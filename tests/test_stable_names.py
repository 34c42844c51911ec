"""rtl_gen.stable_names: a module's emitted Verilog depends on that module only, so the synthesis part cache
reuses an engine whose logic did not change when another engine's did."""
import pytest
from amaranth.back import rtlil
from amaranth.hdl import Module
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out
from pyosys import libyosys as ys

from flow.synth.sources import read_source
from rtl_gen import lint_clean
from rtl_gen.stable_names import new_names, renumber


def test_new_names_count_per_base_in_number_order():
    names = ["$procmux$812_Y", "$procmux$97_Y", "port$13997$92", "port$13997$4", "$15", "$3", "plain", "i$408.mant"]
    assert new_names(names) == {"$procmux$97_Y": "$procmux_Y$0", "$procmux$812_Y": "$procmux_Y$1",
                                "port$13997$4": "port$0", "port$13997$92": "port$1", "$3": "$0", "$15": "$1",
                                "i$408.mant": "i.mant$0"}


class _Counter(wiring.Component):
    """A counter with ``steps`` conditional increments: each is a ``$procmux`` Yosys numbers design-wide."""
    en: In(4)
    y: Out(8)

    def __init__(self, steps: int):
        self.steps = steps
        super().__init__()

    def elaborate(self, platform):
        m = Module()
        for k in range(self.steps):
            with m.If(self.en[k % 4]):
                m.d.sync += self.y.eq(self.y + k + 1)
        return m


class _Pair(wiring.Component):
    en: In(4)
    a: Out(8)
    b: Out(8)

    def __init__(self, steps_a: int):
        self.steps_a = steps_a
        super().__init__()

    def elaborate(self, platform):
        m = Module()
        m.submodules.a = a = _Counter(self.steps_a)       # elaborated first: its count shifts b's numbers
        m.submodules.b = b = _Counter(3)
        m.d.comb += [a.en.eq(self.en), b.en.eq(~self.en), self.a.eq(a.y), self.b.eq(b.y)]
        return m


def _module_texts(tmp_path, steps_a: int, stable: bool, monkeypatch) -> dict[str, str]:
    il = rtlil.convert(_Pair(steps_a), name="pair", emit_src=False)
    if stable:
        text = lint_clean.to_verilog(il, "pair")
    else:                       # the clean-up in this process (to_verilog runs it in a fresh one), renumbering off
        monkeypatch.setattr(lint_clean, "renumber", lambda design: None)
        (tmp_path / "pair.il").write_text(il)
        lint_clean._clean_file(tmp_path / "pair.il", tmp_path / "raw.v")
        monkeypatch.undo()
        text = (tmp_path / "raw.v").read_text()
    path = tmp_path / f"pair_{steps_a}_{stable}.v"
    path.write_text(text)
    modules = read_source([path], []).modules
    return {short: next(m.text for name, m in modules.items() if name.split("$")[0] == f"pair.{short}")
            for short in ("a", "b")}


def test_unchanged_module_keeps_its_text(tmp_path, monkeypatch):
    """Without renumbering, growing module a renumbers b's generated names; with it, b's text is unchanged."""
    raw = [_module_texts(tmp_path, steps, False, monkeypatch) for steps in (2, 5)]
    assert raw[0]["b"] != raw[1]["b"], "the design no longer shows design-wide numbering"
    stable = [_module_texts(tmp_path, steps, True, monkeypatch) for steps in (2, 5)]
    assert stable[0]["b"] == stable[1]["b"]
    assert stable[0]["a"] != stable[1]["a"]


RTLIL = r"""
module \child
  wire width 4 input 1 \p$13997$92
  wire width 4 output 2 \q$7
  cell $not $41
    parameter \A_SIGNED 0
    parameter \A_WIDTH 4
    parameter \Y_WIDTH 4
    connect \A \p$13997$92
    connect \Y \q$7
  end
end
module \top
  wire width 4 input 1 \x
  wire width 4 output 2 \y
  cell \child \u$3
    connect \p$13997$92 \x
    connect \q$7 \y
  end
end
"""


def test_renamed_ports_follow_into_instances(tmp_path):
    """A port renamed in its module is renamed in every instance: the written Verilog elaborates."""
    design = ys.Design()
    (tmp_path / "in.il").write_text(RTLIL)
    ys.run_pass(f"tee -q read_rtlil {tmp_path / 'in.il'}", design)
    renumber(design)
    ys.run_pass(f"tee -q write_verilog -norename -noattr {tmp_path / 'out.v'}", design)
    text = (tmp_path / "out.v").read_text()
    assert "\\p$0 " in text and "\\q$0 " in text and "\\u$0 " in text and "13997" not in text, text
    check = ys.Design()
    ys.run_pass(f"tee -q read_verilog {tmp_path / 'out.v'}", check)
    ys.run_pass("tee -q hierarchy -check -top top", check)       # fails on a port the child does not have


def test_processes_left_are_refused(tmp_path):
    """Process names are not renumbered, so a design still holding processes could collide: it is refused."""
    design = ys.Design()
    (tmp_path / "in.il").write_text(rtlil.convert(_Counter(2), name="counter", emit_src=False))
    ys.run_pass(f"tee -q read_rtlil {tmp_path / 'in.il'}", design)
    with pytest.raises(ValueError, match="processes or memories left"):
        renumber(design)
