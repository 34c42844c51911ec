"""verification.gatesim on the walking-skeleton block: dequant_mac (tiny preset: 4 lanes, fan-in up to 128)
emitted, synthesised onto Nangate45 and its netlist run by the block's own cocotb testbench, bit-exact; the
same netlist with a wrong cell model (XOR2_X1 as XNOR) must fail that testbench and say where; a netlist
with a cell that has no model is refused before Verilator, naming the cell."""
from __future__ import annotations

import json
import re

import pytest

from flow.synth import synthesize
from pdk_config import find_pdk
from verification.gatesim import GateSimError, gatesim
from verification.runner import SimFailure

CASES = "40"                   # random cases per run: each adds gate-level simulation time, not build time
MISMATCH = re.compile(r"case \d+ \(\S+\) lane \d+: expected -?\d+ got -?\d+")


@pytest.fixture(scope="module")
def synth_dm(tmp_path_factory):
    from hw.params import preset
    from rtl_gen import emit
    work = tmp_path_factory.mktemp("gatesim")
    emit("dequant_mac", work / "rtl", preset("tiny"))
    synthesize(work / "rtl", work / "synth", jobs=1)
    return work


def test_dequant_mac_netlist_is_bit_exact(synth_dm):
    result, summary = gatesim(synth_dm / "synth", "dequant_mac", synth_dm / "sim", synth_dm / "cells",
                              env={"NANO_K3_DMAC_CASES": CASES}, quick_build=True)
    assert result.passed and result.n_tests == 3, result          # edge cases, random cases, stream timing
    assert summary["cells"] > 1000 and not summary["macros"]
    assert json.loads((synth_dm / "sim" / "gatesim.json").read_text())["passed"]


def test_wrong_cell_model_is_caught(synth_dm):
    typical = find_pdk().plain_liberty("typical", synth_dm / "pdk_cache")
    text = typical.read_text()
    cell = text.index("cell (XOR2_X1)")
    fn = text.index('"(A ^ B)"', cell)
    wrong = synth_dm / "xor_as_xnor.lib"
    wrong.write_text(text[:fn] + '"!(A ^ B)"' + text[fn + len('"(A ^ B)"'):])
    with pytest.raises(SimFailure) as failure:
        gatesim(synth_dm / "synth", "dequant_mac", synth_dm / "sim-wrong", synth_dm / "cells-wrong",
                testcase="dmac_random", env={"NANO_K3_DMAC_CASES": "10"}, liberty=wrong, quick_build=True)
    assert failure.value.result.n_failed == 1
    assert MISMATCH.search(failure.value.result.log_text()), f"no mismatch report in {failure.value.result.log}"


def test_cell_without_model_is_refused(synth_dm, tmp_path):
    synth = tmp_path / "synth"
    synth.mkdir()
    r = json.loads((synth_dm / "synth" / "synth.json").read_text())
    (synth / "synth.json").write_text(json.dumps(r))
    netlist = (synth_dm / "synth" / r["files"]["netlist"]).read_text()
    first = re.search(r"^(\s*)BUF_X1 ", netlist, re.M)
    assert first, "the netlist has no BUF_X1 to replace"
    (synth / r["files"]["netlist"]).write_text(netlist[:first.start()] + first[1] + "TBUF_X1 " +
                                               netlist[first.end():])
    with pytest.raises(GateSimError, match=r"TBUF_X1 \(1x\): TBUF_X1: three_state"):
        gatesim(synth, "dequant_mac", tmp_path / "sim", synth_dm / "cells")


def test_missing_rom_file_is_named(tmp_path):
    """A ROM whose INIT_FILE does not resolve from the run folder stops the run before Verilator, naming it."""
    from pathlib import Path
    from verification.gatesim import Netlist, check_rom_files
    (tmp_path / "rtl" / "roms").mkdir(parents=True)
    (tmp_path / "rtl" / "roms" / "a.hex").write_text("0\n")
    netlist = Netlist("top", Path("top.v"), tmp_path / "rtl", {"msh_rom": 2}, ("rtl/roms/a.hex", "rtl/roms/b.hex"))
    with pytest.raises(GateSimError, match=r"1 ROM file\(s\) of top.v not found .*first: rtl/roms/b.hex.*write_roms"):
        check_rom_files(netlist, tmp_path)
    check_rom_files(Netlist("top", Path("top.v"), tmp_path / "rtl", {}, ("rtl/roms/a.hex",)), tmp_path)
