"""flow.report: renders with every input missing, and with synth + sta results."""
import json
from pathlib import Path

from flow.report import brief, load, write_report

SYNTH = {
    "top": "mac_sram", "runtime_s": 1.0, "options": {"hierarchy": "hierarchical"},
    "area": {"logic_um2": 1741.0, "macro_um2": 2441.4, "total_um2": 4182.4, "budget_used": 0.001,
             "within_budget": True, "yosys_chip_area_um2": 1741.0},
    "cells": {"count": 1283}, "abc": {"delay_ps": 900.0},
    "macros": {"count": 1, "bits": 2560, "instances": [{"path": "mac_sram.acc_sram", "type": "msh_sram",
                                                        "area_um2": 2441.4}]},
    "hierarchy": {"engines": [{"name": "lane0", "module": "mac_lane", "area_um2": 845.3, "cells": 626}]},
}
PATH = {"start": "a[1]", "end": "r/D", "slack_ns": 7.0, "arrival_ns": 2.9}
STA = {"top": "mac_sram", "period_ns": 10.0, "clock": "clk",
       "constraints": {"io_delay_ns": 2.0, "wire_load": "5K_hvratio_1_1", "macros": "cut"},
       "corners": {c: {"wns_ns": w, "tns_ns": 0.0, "worst_hold_slack_ns": 0.1, "min_period_ns": 10 - w,
                       "fmax_mhz": 1e3 / (10 - w), "paths": [PATH]} for c, w in (("slow", 4.4), ("typical", 7.0))}}


def test_renders_with_every_input_missing(tmp_path):
    report = write_report(tmp_path / "build", tmp_path / "report")
    md = (tmp_path / "report" / "report.md").read_text()
    assert {v["status"] for v in report["stages"].values()} == {"not run"}
    assert md.count("not run") >= 5                       # 3 rows of "What ran" + the verdict + sections
    assert json.loads((tmp_path / "report" / "report.json").read_text())["summary"]["cells"] is None
    b = brief(load(tmp_path / "build"))
    assert "simulation : not run" in b and "synthesis  : not run" in b and "timing     : not run" in b


def test_renders_numbers_and_plots(tmp_path):
    build = tmp_path / "build"
    for rel, data in (("synth/synth.json", SYNTH), ("sta/sta.json", STA), ("sim/summary.json", {"verdict": "PASS"})):
        (build / rel).parent.mkdir(parents=True)
        (build / rel).write_text(json.dumps(data))
    report = write_report(build, tmp_path / "report")
    md = (tmp_path / "report" / "report.md").read_text()
    assert report["summary"]["verdict"] == "PASS" and report["summary"]["cells"] == 1283
    assert "4,182.4 µm²" in md and "| slow | 4.4 |" in md and "not run" not in md
    for fig in report["figures"]:
        assert (tmp_path / "report" / fig["file"]).stat().st_size > 1000
        assert f"Data from `{fig['command']}`" in md
    assert {f["file"] for f in report["figures"]} == {"area_by_module.png", "slack_by_corner.png"}
    b = brief(load(build))
    assert "PASS" in b and "1,283 cells" in b and "timing slow" in b


def test_unreadable_input_is_reported(tmp_path):
    (tmp_path / "synth").mkdir()
    (tmp_path / "synth" / "synth.json").write_text("{half")
    assert load(tmp_path)["synth"]["status"] == "unreadable"
