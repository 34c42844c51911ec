"""verification.replay on a two-part design small enough to write by hand: the top part reads a ROM (a
combinational table), a single-ported SRAM and a child part (a 2-bit register that XORs in the ROM's data), so a
cycle needs the parts and the ROM evaluated in turn. The reference trace comes from a Python model of the same
design (not from the graphs): the right netlist equals it in every cycle, a netlist with one gate wrong differs,
and the first differing cycle and port are named."""
from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from flow.synth.spec import MACRO_STUBS
from verification.aig import AigSim
from verification.replay import Chip, ReplayError, read_memh, replay
from verification.vcd import read_cycles

LUT = [0x2, 0x1, 0x3, 0x0]
TOP_SOURCE = """module top(input clk, input rst_n, input [2:0] in, output [1:0] o1, output [1:0] o2, output [1:0] o3);
endmodule
module \\top.child (clk, d, q);
  input clk; input [1:0] d; output [1:0] q;
endmodule
"""
TOP_NETLIST = """module top(clk, rst_n, in, o1, o2, o3);
  input clk; input rst_n; input [2:0] in; output [1:0] o1; output [1:0] o2; output [1:0] o3;
  wire [7:0] rd1; wire [7:0] rd2; wire [7:0] ram_q; wire [1:0] q; wire [7:0] wd;
  msh_rom #(.DEPTH(4), .WIDTH(8), .INIT_FILE("rtl/roms/lut.hex")) lut (.raddr1(in[1:0]), .rdata1(rd1),
    .raddr2(2'b00), .rdata2(rd2));
  msh_sram #(.DEPTH(4), .WIDTH(8)) ram (.clk(clk), .we(in[2]), .waddr(in[1:0]), .wdata(wd), .wstrb(1'b1),
    .re(1'b1), .raddr(in[1:0]), .rdata(ram_q));
  \\top.child  child (.clk(clk), .d(rd1[1:0]), .q(q));
  assign wd = {6'b000000, q};
  assign o1 = rd1[1:0];
  assign o2 = ram_q[1:0];
  assign o3 = q;
endmodule
"""


def _child(gate1: str) -> str:
    pins = ("A", "B", "Z") if gate1 == "XOR2_X1" else ("A1", "A2", "ZN")
    return f"""module \\top.child (clk, d, q);
  input clk; input [1:0] d; output [1:0] q; wire n0, n1;
  XOR2_X1 x0 (.A(q[0]), .B(d[0]), .Z(n0));
  {gate1} x1 (.{pins[0]}(q[1]), .{pins[1]}(d[1]), .{pins[2]}(n1));
  DFF_X1 f0 (.D(n0), .CK(clk), .Q(q[0]), .QN());
  DFF_X1 f1 (.D(n1), .CK(clk), .Q(q[1]), .QN());
endmodule
"""


def _design(tmp_path, name: str, child_gate: str):
    """A flow.synth-shaped folder (synth.json with parts and macros, part cache, macro stubs) and its RTL folder."""
    rtl = tmp_path / f"{name}-rtl" / "rtl"
    (rtl / "roms").mkdir(parents=True)
    (rtl / "roms" / "lut.hex").write_text("// the table\n" + "\n".join(f"{w:02x}" for w in LUT) + "\n")
    cache, synth = tmp_path / f"{name}-cache", tmp_path / name
    for digest, source, netlist in (("t", TOP_SOURCE, TOP_NETLIST), ("c", _child("XOR2_X1"), _child(child_gate))):
        (cache / digest).mkdir(parents=True)
        (cache / digest / "source.v").write_text(source)
        (cache / digest / "netlist.v").write_text(netlist)
    synth.mkdir()
    (synth / "macro_stubs.v").write_text(MACRO_STUBS)
    parts = [{"top": "top", "black_boxes": ["top.child"], "digest": "t", "size_estimate": 20},
             {"top": "top.child", "black_boxes": [], "digest": "c", "size_estimate": 5}]
    macros = [{"path": "top.lut", "type": "msh_rom", "depth": 4, "width": 8, "init_file": "rtl/roms/lut.hex"},
              {"path": "top.ram", "type": "msh_sram", "depth": 4, "width": 8}]
    (synth / "synth.json").write_text(json.dumps({"top": "top", "parts": parts, "part_cache": str(cache),
                                                  "macros": {"instances": macros}}))
    return synth, rtl


def _reference_vcd(path, inputs: list[int]) -> None:
    """The design's ports, cycle by cycle, from a Python model of it; inputs change with the rising edge and the
    first two cycles hold reset, as a cocotb testbench does."""
    q, ram, rdata = 0, [0] * 4, 0
    names = {"clk": ("!", 1), "rst_n": ('"', 1), "in": ("#", 3), "o1": ("$", 2), "o2": ("%", 2), "o3": ("&", 2)}
    lines = ["$timescale 1ps $end", "$scope module $rootio $end",
             *(f"$var wire {w} {c} {n} $end" for n, (c, w) in names.items()), "$upscope $end",
             "$enddefinitions $end"]
    for t, x in enumerate(inputs):
        rd1 = LUT[x & 3]
        values = {"clk": int(t > 0), "rst_n": int(t >= 2), "in": x, "o1": rd1 & 3, "o2": rdata & 3, "o3": q}
        lines.append(f"#{10 * t}")
        lines += [f"b{v:0{names[n][1]}b} {names[n][0]}" if names[n][1] > 1 else f"{v}{names[n][0]}"
                  for n, v in values.items()]
        lines += [f"#{10 * t + 5}", "0!"]
        rdata = ram[x & 3]                      # read before the write of the same cycle (SPEC §5)
        if x & 4:
            ram[x & 3] = q
        q ^= rd1 & 3
    path.write_text("\n".join(lines) + "\n")


@pytest.fixture(scope="module")
def cells(tmp_path_factory):
    from flow.cell_models import DEFAULT_OUT, ensure_models
    return ensure_models(DEFAULT_OUT).verilog


def test_the_right_netlist_replays_the_trace_and_a_wrong_one_is_caught(tmp_path, cells):
    rng = np.random.default_rng(7)
    vcd = tmp_path / "trace.vcd"
    _reference_vcd(vcd, [int(v) for v in rng.integers(0, 8, size=200)])
    cycles = read_cycles(vcd)
    assert cycles.n == 199 and cycles.bits["in"].shape == (199, 3)     # one sample before each rising edge

    synth, rtl = _design(tmp_path, "right", "XOR2_X1")
    chip = Chip(synth, rtl, tmp_path / "graphs", cells, log=lambda _: None)
    assert chip.tops == ["top", "top.child"] and {m.path for m in chip.macros} == {"top.lut", "top.ram"}
    rec = replay(chip, cycles, log=lambda _: None)
    assert rec["equal"] and rec["compared"] == 199 - 2, rec
    assert rec["max_rounds_per_cycle"] >= 2       # the child's data needs the ROM's, within the cycle
    assert rec["macros"]["top.ram"]["reads"] == 199 and rec["macros"]["top.ram"]["writes"] > 50, rec

    synth, rtl = _design(tmp_path, "wrong", "OR2_X1")
    wrong = replay(Chip(synth, rtl, tmp_path / "graphs", cells, log=lambda _: None), cycles, log=lambda _: None)
    assert not wrong["equal"] and wrong["first_difference"]["cycle"] >= 2, wrong
    assert {p["port"] for p in wrong["first_difference"]["ports"]} <= {"o2", "o3"}, wrong


def _model_values(inputs: list[int]) -> dict[str, list[int]]:
    """The child part's cell outputs in each cycle of _reference_vcd's model (before the clock edge)."""
    q, seen = 0, {"x0": [], "x1": [], "f0": [], "f1": []}
    for x in inputs:
        n = q ^ (LUT[x & 3] & 3)
        for k in (0, 1):
            seen[f"x{k}"].append(n >> k & 1)
            seen[f"f{k}"].append(q >> k & 1)
        q = n
    return seen


def test_cell_toggles_are_counted_per_output_pin_and_named_as_opensta_names_them(tmp_path, cells):
    """The cells' output pins made graph outputs: each pin's changes from one cycle to the next after reset, as the
    design's Python model has them, under the instance's hierarchical name (child/x0)."""
    from flow.cell_models import DEFAULT_OUT, ensure_models
    rng = np.random.default_rng(11)
    inputs = [int(v) for v in rng.integers(0, 8, size=120)]
    vcd = tmp_path / "trace.vcd"
    _reference_vcd(vcd, inputs)
    synth, rtl = _design(tmp_path, "right", "XOR2_X1")
    models = ensure_models(DEFAULT_OUT)
    chip = Chip(synth, rtl, tmp_path / "graphs", cells, log=lambda _: None,
                cell_outputs={name: c["outputs"] for name, c in models.cells.items()})
    rec = replay(chip, read_cycles(vcd), log=lambda _: None)
    assert rec["equal"], rec
    start = rec["compared_from"]                  # counting begins with the cycle after it
    assert chip.counted == len(inputs) - 1 - start - 1
    values = _model_values(inputs[:len(inputs) - 1])
    changes = {k: sum(v[t] != v[t - 1] for t in range(start + 1, len(v))) for k, v in values.items()}
    assert all(changes.values()), changes       # the run moves every cell
    got = chip.cell_toggles()
    assert got == {"child/x0": ("XOR2_X1", {"Z": changes["x0"]}), "child/x1": ("XOR2_X1", {"Z": changes["x1"]}),
                   "child/f0": ("DFF_X1", {"Q": changes["f0"], "QN": changes["f0"]}),
                   "child/f1": ("DFF_X1", {"Q": changes["f1"], "QN": changes["f1"]})}, got


def test_a_missing_rom_file_and_a_trace_without_reset_are_refused(tmp_path, cells):
    synth, rtl = _design(tmp_path, "d", "XOR2_X1")
    vcd = tmp_path / "trace.vcd"
    _reference_vcd(vcd, [1, 2, 3, 4])
    chip = Chip(synth, rtl, tmp_path / "graphs", cells, log=lambda _: None)
    cycles = read_cycles(vcd)
    cycles.bits["rst_n"][:] = 1
    with pytest.raises(ReplayError, match="never asserts rst_n"):
        replay(chip, cycles, log=lambda _: None)
    (rtl / "roms" / "lut.hex").unlink()
    with pytest.raises(ReplayError, match=r"top.lut: ROM contents rtl/roms/lut.hex not found"):
        Chip(synth, rtl, tmp_path / "graphs", cells, log=lambda _: None)


def test_readmemh_reads_addresses_and_comments(tmp_path):
    f = tmp_path / "x.hex"
    f.write_text("// header\n0a 0b\n@4 ff // four\n1_0\n")
    assert read_memh(f, 6) == [0x0A, 0x0B, 0, 0, 0xFF, 0x10]


def test_the_graph_simulator_runs_64_lanes(tmp_path, cells):
    """A one-bit toggle register with enable, through Yosys into a graph: each of the 64 lanes counts its own
    enables."""
    from verification.aig import read_aig
    v = tmp_path / "t.v"
    v.write_text("module t(input clk, input e, output reg q); always @(posedge clk) if (e) q <= ~q; endmodule\n")
    aag, sym = tmp_path / "t.aag", tmp_path / "t.map"
    script = [f"read_verilog {v}", "proc", "techmap", "dffunmap", "aigmap", f"write_aiger -ascii -map {sym} {aag}"]
    subprocess.run([sys.executable, "-c", "from verification.replay_graphs import _graph_worker; "
                    f"_graph_worker({json.dumps(json.dumps(script))})"], check=True, capture_output=True)
    sim = AigSim(read_aig(aag, sym))
    rng = np.random.default_rng(1)
    enables = rng.integers(0, 2 ** 63, size=30, dtype=np.uint64)
    e_index = [i for i, (n, _) in sim.aig.input_names.items() if n == "e"]
    count = np.zeros(64, dtype=np.int64)
    for w in enables:
        sim.set(np.array(e_index), np.array([w], dtype=np.uint64))
        sim.eval()
        sim.step()
        count += (w >> np.arange(64, dtype=np.uint64)) & np.uint64(1) != 0
    lanes = (sim.state[0] >> np.arange(64, dtype=np.uint64)) & np.uint64(1)
    assert (lanes == (count % 2)).all()
