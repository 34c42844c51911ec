"""flow.blocks: the table as text and Markdown (every row from one run, with the RTL it measured; a block that
stopped says where), and a missing PDK stops the run before any block starts."""

from flow import blocks
from flow.blocks import CORNERS, markdown, table

ROWS = [{"block": "lut_unit", "cells": 32_010, "area_um2": 45_009.4, "sram_bits": 0, "rom_bits": 189_584,
         "wns_ns": {"typical": 5.79, "slow": 4.168}, "rtl": {"params_hash": "0123456789abcdef", "verilog_sha256": "f" * 64},
         "tests": {"status": "pass", "tests": 2, "failures": 0, "errors": 0, "skipped": 0}},
        {"block": "mac_array", "cells": 5_000, "area_um2": 9_100.0, "sram_bits": 8_192, "rom_bits": 0,
         "wns_ns": {"typical": 5.2, "slow": -0.25}, "rtl": {"params_hash": "fedcba9876543210", "verilog_sha256": "e" * 64},
         "tests": {"status": "FAIL", "tests": 4, "failures": 1, "errors": 0, "skipped": 0}},
        {"block": "kda_engine", "error": "synth failed, see build/blocks/kda_engine/synth.log"}]


def test_markdown_rows_name_their_rtl_and_the_command():
    md = markdown(ROWS, "python -m flow.blocks --blocks lut_unit mac_array kda_engine").splitlines()
    assert md[0] == "Measured by `python -m flow.blocks --blocks lut_unit mac_array kda_engine` (one run; 10 ns clock, Nangate45)."
    assert md[2].startswith("| block | cells | area µm² | SRAM bits | ROM bits | WNS typical ns | WNS slow ns | tests |")
    assert md[4] == "| lut_unit | 32,010 | 45,009 | 0 | 189,584 | 5.790 | 4.168 | pass (2/2) | 0123456789abcdef, ffffffffffff |"
    assert "| -0.250 | FAIL (3/4) |" in md[5]
    assert md[6].startswith("| kda_engine | synth failed, see build/blocks/kda_engine/synth.log |")
    assert all(line.count("|") == 10 for line in md[2:])          # every row as wide as the header


def test_text_table():
    lines = table(ROWS).splitlines()
    assert lines[2].split()[:2] == ["lut_unit", "32,010"] and lines[2].endswith("pass (2/2)")
    assert lines[4] == "kda_engine     synth failed, see build/blocks/kda_engine/synth.log"
    assert CORNERS == ("typical", "slow")


def test_missing_pdk_stops_before_any_block(monkeypatch, tmp_path, capsys):
    monkeypatch.setenv("NANGATE45_PDK", str(tmp_path / "no_pdk"))
    for var in ("FLOW_HOME", "ORFS_HOME"):
        monkeypatch.delenv(var, raising=False)

    def run_block(*_):
        raise AssertionError("a block started without a PDK")
    monkeypatch.setattr(blocks, "run_block", run_block)
    assert blocks.main(["--blocks", "lut_unit", "--out", str(tmp_path / "out")]) == 1
    assert "Nangate45 PDK not found" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()
