"""flow.readme_results: the README's results block from a synthetic build folder; missing, unreadable and
stale results said as such with their command, never as numbers; the markers in the README."""
import hashlib
import json
import os
from pathlib import Path

import pytest

from flow.readme_results import BEGIN, END, ReadmeError, main, render, rewrite

REPO = Path(__file__).resolve().parent.parent
CONFIG = {"block": "chip", "top": "msh_chip_top", "params": {"name": "nano"}}
CONFIG_RAW = json.dumps(CONFIG).encode()
CONFIG_SHA = hashlib.sha256(CONFIG_RAW).hexdigest()
CORNERS = ("slow", "typical", "fast")


def _sta(wns: tuple[float, float, float], sha: str = CONFIG_SHA) -> dict:
    return {"top": "msh_chip_top", "period_ns": 10.0, "synth_config_sha256": sha,
            "corners": {c: {"wns_ns": w, "tns_ns": min(w, 0.0), "min_period_ns": 10 - w, "paths": []}
                        for c, w in zip(CORNERS, wns)}}


LONG = {"name": "nano-g128-s48-long", "run": {"seq_len": 48}, "cycles": 121_441, "cycles_per_token": 2530.02,
        "tokens_per_s": 39_525.4, "read_beats": 7_900, "write_beats": 6_200, "bit_exact": True, "min_cosine": 0.99991,
        "argmax_agreement": 1.0, "model": {"error": -0.0008}}
FILES = {
    "sim/summary.json": {"schema": 1, "top": "msh_chip_top", "verdict": "pass", "tests": 5, "failed": 0,
                         "runs": [LONG, {**LONG, "name": "nano-g128-s16-short", "min_cosine": 0.99987}],
                         "throughput": {"run": LONG["name"], "cycles": 121_441, "cycles_per_token": 2530.02,
                                        "tokens_per_s": 39_525.4}, "elasticity": {"ratio": 1.036}},
    "bench/bench.json": {"runs": [LONG], "throughput_run": LONG["name"]},
    "synth/synth.json": {"top": "msh_chip_top", "rtl": {"config_sha256": CONFIG_SHA}, "hierarchy": {},
                         "area": {"logic_um2": 2_512_000.0, "macro_um2": 1_480_000.0, "total_um2": 3_992_000.0,
                                  "budget_used": 0.998},
                         "cells": {"count": 1_859_745},
                         "macros": {"bits": 1_549_456, "instances": [{"type": "msh_sram", "bits": 1_450_000},
                                                                     {"type": "msh_rom", "bits": 99_456}]}},
    "sta/sta.json": _sta((2.25, 6.67, 7.23)),
    "place/place.json": {"top": "msh_chip_top", "synth_config_sha256": CONFIG_SHA, "files": {},
                         "die": {"area_um2": 5_290_000.0}, "utilization": 0.63, "hpwl_um": 65.3e6,
                         "cells_placed": 1_962_373, "macros_placed": 306,
                         "sta": _sta((-12.6, 3.84, 6.49))["corners"]},
    "place/sta/sta.json": _sta((-12.6, 3.84, 6.49)),
    "signoff/signoff.json": {"top": "msh_chip_top", "synth_config_sha256": CONFIG_SHA, "signed_off": False,
                             "clock": {"model": "ideal (no clock tree)", "setup_uncertainty_ns": 0.3},
                             "corners": {c: {"wns_ns": w, "worst_hold_slack_ns": 0.02, "max_transition_violations": 7}
                                         for c, w in zip(CORNERS, (-1.331, 5.946, 6.696))},
                             "design_rules": {"max_capacitance_violations": 3_235, "max_fanout_violations": 0},
                             "std_cell_area_um2": 2_690_000.0},
    "chip_power/chip_power.json": {"synth_config_sha256": CONFIG_SHA, "total_mW": 250.0, "engines": [],
                                   "logic": {"internal_mW": 60.0, "switching_mW": 40.0, "leakage_mW": 50.0},
                                   "macros": {"tiles": 331, "leakage_mW": 80.0, "clock_mW": 19.0, "pins_mW": 1.0}},
    "logs/runtime.json": {"schema": 1, "wall_s": 4_000.0, "steps": [
        {"name": "rtl", "group": 0, "status": "ok", "seconds": 61.0},
        {"name": "sta", "group": 3, "status": "ok", "seconds": 416.0},
        {"name": "place", "group": 3, "status": "ok", "seconds": 2_072.0}]},
}


def _build(tmp_path: Path, files: dict, config: bool = True) -> Path:
    build = tmp_path / "build"
    (build / "rtl").mkdir(parents=True)
    for rel, data in files.items():
        path = build / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(data if isinstance(data, str) else json.dumps(data))
    if config:
        (build / "rtl" / "config.json").write_bytes(CONFIG_RAW)
        for rel in files:             # every result written after the RTL, as a run of the flow does
            os.utime(build / rel, (build.stat().st_mtime + 10,) * 2)
    return build


def _row(block: str, name: str) -> str:
    return next(line for line in block.splitlines() if line.startswith(f"| {name} |"))


def test_empty_build_says_what_to_run(tmp_path):
    block = render(_build(tmp_path, {}, config=False))
    assert "No RTL in `build/rtl` (`make rtl` emits it)" in block
    for name, make in (("correctness", "make sim"), ("speed", "make bench"), ("area (synthesis)", "make synth"),
                       ("timing before placement", "make sta"), ("placement", "make place"),
                       ("sign-off", "make signoff"), ("synthesis through sign-off", "make signoff"),
                       ("engines one by one", "make blocks"),
                       ("`make demo` step times", "make demo")):
        assert f"not run: `{make}` writes it" in _row(block, name), name
    assert not any(ch.isdigit() for line in block.splitlines()[2:] for ch in line.split("|")[2]), block


def test_every_number_comes_from_the_files(tmp_path):
    block = render(_build(tmp_path, FILES))
    assert "`msh_chip_top` (block chip, preset nano, config.json sha256 " + CONFIG_SHA[:12] in block
    assert "bit-exact with the fixed-point model in 2/2 runs, min cosine with the float model 0.999870" in block
    assert "**39,525 tokens/s** at 100 MHz = 2,530.0 cycles/token" in _row(block, "speed")
    assert "perf/model.py predicts it within -0.08 %" in _row(block, "speed")
    assert "**3.992 mm²** = 2.512 logic (1,859,745 cells" in _row(block, "area (synthesis)")
    assert "slow +2.250 / typical +6.670 / fast +7.230 ns at 10 ns" in _row(block, "timing before placement")
    assert "die 5.29 mm², 63.0 % row utilization, 1,962,373 cells and 306 fakeram45 macros, HPWL 65.3 m" \
        in _row(block, "placement")
    assert "slow -12.600" in _row(block, "placement")
    placed = _row(block, "speed at the placed clock")      # this sign-off names no period: placement's clock
    assert "at the placed clock" in placed and "after placement" in placed
    assert placed.endswith("| `build/place/place.json` |")
    so = json.loads(json.dumps(FILES["signoff/signoff.json"]))
    for c, v in so["corners"].items():
        v["min_period_ns"] = 10.0 - v["wns_ns"]
    placed = _row(render(_build(tmp_path / "b2", {**FILES, "signoff/signoff.json": so})), "speed at the placed clock")
    assert "after sign-off's repair is 11.331 ns" in placed and placed.endswith("| `build/signoff/signoff.json` |")
    signoff = _row(block, "sign-off")
    assert "**not signed off**: setup slow -1.331 / typical +5.946 / fast +6.696 ns" in signoff
    assert "21 max-transition, 3,235 max-capacitance, 0 max-fanout" in signoff and "not routed" in signoff
    assert "cell area 2.690 mm², priced with the macros 4.170 mm²" in signoff        # 2.69 + 1.48 of synthesis
    power = _row(block, "power, energy per token")       # 0.25 W at the speed row's 39,525.4 tokens/s
    assert "250.0 mW at the typical corner" in power and "logic 150.0 mW, 331 fakeram45 tiles 100.0 mW" in power
    assert f"**{0.25 / 39_525.4 * 1e6:.3f} µJ/token**, {39_525.4 / 0.25:,.0f} tokens/s/W" in power
    assert "rtl 1:01" in _row(block, "`make demo` step times")
    assert "sta 6:56 beside place 34:32" in _row(block, "`make demo` step times")
    assert "stale" not in block and "Warning" not in block


def test_synthesis_through_signoff_adds_the_three_steps(tmp_path):
    timed = {**FILES, "synth/synth.json": {**FILES["synth/synth.json"], "runtime_s": 505.0},
             "place/place.json": {**FILES["place/place.json"], "runtime_s": 435.0},
             "signoff/signoff.json": {**FILES["signoff/signoff.json"], "runtime_s": 826.0}}
    row = _row(render(_build(tmp_path, timed)), "synthesis through sign-off")
    assert "1,766 s (29.4 min), within the 30-minute goal: synth 505 s, place 435 s, signoff 826 s" in row
    assert "not measured in this file" in _row(render(_build(tmp_path / "b", FILES)), "synthesis through sign-off")


def test_stale_and_unreadable_results_are_marked(tmp_path):
    files = {**FILES, "synth/synth.json": {**FILES["synth/synth.json"], "rtl": {"config_sha256": "ab" * 32}},
             "signoff/signoff.json": "{not json", "bench/bench.json": FILES["bench/bench.json"]}
    build = _build(tmp_path, files)
    old = build.stat().st_mtime - 1000
    os.utime(build / "bench/bench.json", (old, old))           # benchmarked before the RTL was emitted again
    block = render(build)
    area = _row(block, "area (synthesis)")
    assert area.startswith("| area (synthesis) | **stale**, made from another RTL (config sha256 abababababab")
    assert "(`make synth` refreshes it): **3.992 mm²**" in area
    assert "**stale**, older than build/rtl/config.json (`make bench` refreshes it)" in _row(block, "speed")
    assert "unreadable (" in _row(block, "sign-off") and "`make signoff` writes it again" in _row(block, "sign-off")
    assert "stale" not in _row(block, "timing before placement")


def test_rewrite_keeps_the_rest_and_needs_the_markers(tmp_path):
    text = f"# title\n\nbefore\n{BEGIN}\nold numbers\n{END}\nafter\n"
    assert rewrite(text, "new") == f"# title\n\nbefore\n{BEGIN}\nnew\n{END}\nafter\n"
    for bad in ("no markers\n", f"{END}\n{BEGIN}\n", f"{BEGIN}\n{BEGIN}\n{END}\n"):
        with pytest.raises(ReadmeError, match="marker lines"):
            rewrite(bad, "new")


def test_main_writes_the_readme_and_reports_a_missing_marker(tmp_path, capsys):
    build = _build(tmp_path, {"sim/summary.json": FILES["sim/summary.json"]})
    readme = tmp_path / "README.md"
    readme.write_text(f"intro\n{BEGIN}\n{END}\noutro\n")
    assert main(["--build", str(build), "--readme", str(readme)]) == 0
    text = readme.read_text()
    assert text.startswith(f"intro\n{BEGIN}\nFrom `build/`") and text.endswith(f"{END}\noutro\n")
    assert "**PASS**" in text and "not run: `make synth` writes it" in text
    readme.write_text("no markers\n")
    assert main(["--build", str(build), "--readme", str(readme)]) == 1
    assert "marker lines" in capsys.readouterr().err and readme.read_text() == "no markers\n"


def test_the_readme_has_the_markers_once():
    text = (REPO / "README.md").read_text()
    assert text.count(BEGIN) == 1 and text.count(END) == 1 and text.index(BEGIN) < text.index(END)
