"""flow.report: renders with every input missing, for a block and for the chip, with placement and blocks."""
import json
import re

import pytest

from flow.report import FIGURES, K3_TOKENS_PER_S, PORT_LIMIT_TOKENS_PER_S, brief, flow_seconds, load, write_report

SYNTH = {
    "top": "mac_sram", "runtime_s": 1.0, "options": {"hierarchy": "hierarchical"},
    "area": {"logic_um2": 1741.0, "macro_um2": 2441.406, "total_um2": 4182.406, "budget_used": 0.001046,
             "within_budget": True, "yosys_chip_area_um2": 1741.0},
    "cells": {"count": 1283}, "abc": {"delay_ps": 900.0},
    "macros": {"count": 2, "bits": 2560, "instances": [
        {"path": "mac_sram.lane0.acc_sram", "type": "msh_sram", "depth": 64, "width": 32, "bits": 2048, "area_um2": 1953.125},
        {"path": "mac_sram.lut", "type": "msh_rom", "depth": 16, "width": 32, "bits": 512, "area_um2": 488.281}]},
    "hierarchy": {"engines": [{"name": "lane0", "module": "mac_lane", "area_um2": 845.3, "cells": 626},
                              {"name": "(top-level logic)", "module": "mac_sram", "area_um2": 895.7, "cells": 657}]},
}
PATH = {"start": "a[1]", "end": "r/D", "slack_ns": 4.4, "arrival_ns": 3.6}
STA = {"top": "mac_sram", "period_ns": 10.0, "clock": "clk",
       "constraints": {"io_delay_ns": 2.0, "wire_load": "5K_hvratio_1_1", "macros": "cut"},
       "corners": {c: {"wns_ns": w, "tns_ns": 0.0, "worst_hold_slack_ns": 0.1, "min_period_ns": 10 - w,
                       "fmax_mhz": 1e3 / (10 - w), "paths": [PATH]} for c, w in (("slow", 4.4), ("typical", 7.0))}}
BLOCK_SIM = {"schema": 1, "block": "mac_sram", "top": "mac_sram", "verdict": "pass", "tests": 3, "failed": 0,
             "details": [{"name": "mac_random", "passed": True, "time_s": 1.5}], "lint": {"errors": 0, "warnings": 2},
             "seed": 7, "command": "python -m verification.sim --rtl build/rtl --out build/sim"}


def _run(name, cycles, seq_len, exact=True, cos=0.99999, agree=1.0):
    return {"name": name, "passed": exact, "cycles": cycles, "cycles_per_token": cycles / seq_len,
            "tokens_per_s": 1e8 * seq_len / cycles, "bit_exact": exact, "min_cosine": cos, "argmax_agreement": agree}


CHIP_SIM = {"schema": 1, "block": "chip", "top": "msh_chip_top", "verdict": "pass", "tests": 3, "failed": 0,
            "runs": [_run("nano-g128-s48-long", 480_000, 48), _run("nano-g128-s16-short", 170_000, 16, cos=0.999987),
                     _run("nano-g128-s16-elastic", 174_000, 16)],
            "throughput": {"run": "nano-g128-s48-long", "cycles": 480_000, "cycles_per_token": 10_000.0,
                           "tokens_per_s": 10_000.0},
            "elasticity": {"ratio": 174 / 170}, "argmax_agreement_pooled": {"value": 0.9987},
            "lint": {"errors": 0, "warnings": 3}, "seed": 20260706,
            "command": "python -m verification.chip_sim --rtl build/rtl --out build/sim"}
PLACE = {"top": "mac_sram", "period_ns": 10.0, "die": {"area_um2": 12_345.6}, "utilization": 0.6, "hpwl_um": 9876.5,
         "cells_placed": 1283, "macros_placed": 1, "runtime_s": 1500.0,
         "sta": {c: {"wns_ns": w, "tns_ns": min(w, 0.0), "worst_hold_slack_ns": 0.1, "min_period_ns": 10 - w}
                 for c, w in (("slow", -1.25), ("typical", 6.5))},
         "files": {"placement_png": "mac_sram_placement.png", "png": "mac_sram.png"}}
POST_PATH = {"start": "u/acc_reg[3]", "end": "u/y_reg[31]/D", "slack_ns": -1.25, "arrival_ns": 11.0}
PLACE_STA = {**STA, "corners": {c: {**v, "wns_ns": PLACE["sta"][c]["wns_ns"], "tns_ns": PLACE["sta"][c]["tns_ns"],
                                    "paths": [POST_PATH]} for c, v in STA["corners"].items()}}
BLOCKS = {"schema": 1, "corners": ["typical", "slow"], "command": "python -m flow.blocks --blocks lut_unit mac_array",
          "blocks": [{"block": "lut_unit", "cells": 900, "area_um2": 2100.0, "sram_bits": 0, "rom_bits": 4096,
                      "wns_ns": {"typical": 6.1, "slow": 3.3}, "tests": {"status": "pass"}},
                     {"block": "mac_array", "cells": 5000, "area_um2": 9100.0, "sram_bits": 8192, "rom_bits": 0,
                      "wns_ns": {"typical": 5.2, "slow": 1.9}, "tests": {"status": "pass"}},
                     {"block": "kda_engine", "error": "synth failed, see build/blocks/kda_engine/synth.log"}]}


def _build(tmp_path, files: dict):
    """Write {path under build: JSON-able data or PNG bytes} into tmp_path/build."""
    build = tmp_path / "build"
    for rel, data in files.items():
        path = build / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data) if isinstance(data, bytes) else path.write_text(json.dumps(data))
    return build


def _png(color):
    import io

    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(2, 2))
    ax.add_patch(plt.Rectangle((0.2, 0.2), 0.5, 0.5, color=color))
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    plt.close(fig)
    return buf.getvalue()


def _check_figures(report, out, md):
    """Every figure exists, is embedded in the Markdown and names the command(s) behind its data."""
    for fig in report["figures"]:
        assert (out / fig["file"]).stat().st_size > 1000, fig["file"]
        assert f"]({fig['file']})" in md, fig["file"]
        assert fig["commands"] and all(f"`{c}`" in md for c in fig["commands"]), fig
    referenced = set(re.findall(r"\]\(([^)]+\.png)\)", md))
    assert referenced == {f["file"] for f in report["figures"]}
    assert not any(p.name.startswith(".") for p in out.iterdir())          # no temporary file left behind


def test_renders_with_every_input_missing(tmp_path):
    out = tmp_path / "report"
    report = write_report(tmp_path / "build", out)
    md = (out / "report.md").read_text()
    assert {v["status"] for v in report["stages"].values()} == {"not run"}
    assert md.count("| not run |") == len(report["stages"])                # one "What ran" row per stage
    s = json.loads((out / "report.json").read_text())["summary"]
    assert s["size"]["cells"] is None and s["speed"]["measured"] is False and s["placement"] is None
    # only the reference bars can be drawn: ours is "not measured yet", next to 8,721 and 20,470
    assert [f["file"] for f in report["figures"]] == ["tokens_per_s.png"]
    assert "not measured yet" in md and "8,721" in md and "20,470" in md
    _check_figures(report, out, md)
    lines = brief(load(tmp_path / "build")).splitlines()
    assert lines == ["simulation : not run", "speed      : not measured yet (K3 8,721 tokens/s; port limit 20,470)",
                     "synthesis  : not run", "timing     : not run", "placement  : not run"]


def test_block_sim_synth_sta(tmp_path):
    build = _build(tmp_path, {"sim/summary.json": BLOCK_SIM, "synth/synth.json": SYNTH, "sta/sta.json": STA})
    out = tmp_path / "report"
    report = write_report(build, out)
    md = (out / "report.md").read_text()
    s = report["summary"]
    assert s["correctness"]["verdict"] == "PASS" and s["correctness"]["level"] == "block"
    assert s["size"]["cells"] == 1283 and s["size"]["sram_bits"] == 2048 and s["size"]["rom_bits"] == 512
    assert "**PASS** (block `mac_sram`, 3/3 tests)" in md
    assert "4,182.4 µm²" in md and "**0.0042 mm²**" in md and '| Yosys "Chip area" | 1,741.0 µm² |' in md
    assert "| slow | 4.4 |" in md and "| WNS slow, pre / post placement | 4.400 / not run ns |" in md
    assert "2,560 bits: SRAM 2,048, ROM 512" in md
    assert {f["file"] for f in report["figures"]} == {"tokens_per_s.png", "area_by_engine.png", "memory_bits.png",
                                                     "slack_by_corner.png"}
    _check_figures(report, out, md)
    assert "python -m verification.sim --rtl build/rtl --out build/sim" in md         # the summary's own command
    lines = brief(load(build)).splitlines()
    assert 5 <= len(lines) <= 8
    assert lines[0] == "simulation : PASS, 3/3 tests (mac_sram)"
    assert "1,283 cells" in lines[2] and lines[3].startswith("timing pre : slack slow 4.400 / typical 7.000 ns")
    assert lines[4] == "placement  : not run"


def test_chip_sim_with_runs(tmp_path):
    build = _build(tmp_path, {"sim/summary.json": CHIP_SIM})
    out = tmp_path / "report"
    report = write_report(build, out)
    md = (out / "report.md").read_text()
    c, sp = report["summary"]["correctness"], report["summary"]["speed"]
    assert c["level"] == "chip" and c["bit_exact"] and c["bit_exact_runs"] == "3/3"
    assert c["min_cosine"] == 0.999987 and c["argmax_agreement"] == 0.9987
    assert sp["measured"] and sp["source"] == "sim" and sp["tokens_per_s"] == 10_000.0
    assert sp["k3_tokens_per_s"] == K3_TOKENS_PER_S and sp["port_limit_tokens_per_s"] == PORT_LIMIT_TOKENS_PER_S
    assert "| bit-exact with the fixed-point model | 3/3 runs |" in md and "| 0.999987 |" in md and "0.9987" in md
    assert "| cycles/token (long run) | 10,000.0 |" in md and "**10,000** (1.15× K3's 8,721" in md
    assert "| nano-g128-s48-long | True | 480,000 | 10,000.0 | 10,000 | True | 0.999990 | 1.0000 |" in md
    assert "Elasticity: cycles at base latency 48 / at 24 = 1.0235." in md
    tokens = next(f for f in report["figures"] if f["file"] == "tokens_per_s.png")
    assert tokens["commands"] == [CHIP_SIM["command"]] and "not measured" not in tokens["caption"]
    _check_figures(report, out, md)
    lines = brief(load(build)).splitlines()
    assert lines[0] == "simulation : PASS, chip `msh_chip_top`: bit-exact 3/3 runs, min cosine 0.999987, argmax 0.9987"
    assert lines[1] == "speed      : 10,000 cycles/token = 10,000 tokens/s (1.15x K3's 8,721; port limit 20,470)"


def test_bench_takes_precedence_over_sim(tmp_path):
    bench = {"tokens_per_s": 12_000.0, "cycles_per_token": 8_333.3, "command": "make bench"}
    report = write_report(_build(tmp_path, {"sim/summary.json": CHIP_SIM, "bench/bench.json": bench}), tmp_path / "r")
    assert report["summary"]["speed"]["source"] == "bench" and report["summary"]["speed"]["tokens_per_s"] == 12_000.0


def test_place_and_blocks(tmp_path):
    build = _build(tmp_path, {"synth/synth.json": SYNTH, "sta/sta.json": STA, "place/place.json": PLACE,
                              "place/sta/sta.json": {**PLACE_STA, "runtime_s": 2.0}, "blocks/blocks.json": BLOCKS, "place/mac_sram_placement.png": _png("tab:green"),
                              "place/mac_sram.png": _png("tab:red")})
    out = tmp_path / "report"
    report = write_report(build, out)
    md = (out / "report.md").read_text()
    t = report["summary"]["timing"]
    assert t["corners"]["slow"]["pre"]["wns_ns"] == 4.4 and t["corners"]["slow"]["post"]["wns_ns"] == -1.25
    assert "| WNS slow, pre / post placement | 4.400 / -1.250 ns |" in md
    assert "| shortest period, worst corner, pre / post | 5.600 / 11.250 ns (clock 10.0 ns) |" in md
    assert "die 0.0123 mm², utilization 0.600" in md and "HPWL 9,876 µm" in md
    assert "| mac_array | 5,000 | 9,100.0 | 8,192 | 0 | 5.200 | 1.900 | pass |" in md
    assert "| kda_engine | synth failed, see build/blocks/kda_engine/synth.log |" in md
    post = md.split("### After placement")[1]                 # where and by how much placement misses
    assert "Misses the clock: slow by 1.250 ns (TNS -1.25 ns)." in post
    assert "| -1.25 | 11.0 | `u/acc_reg[3]` | `u/y_reg[31]/D` |" in post
    assert "| sta | — |" in md and "| place | 1,500 |" in md          # STA of this build has no runtime: no total
    assert (out / "placement.png").read_bytes() == (build / "place" / "mac_sram_placement.png").read_bytes()
    assert {"placement.png", "layout.png"} <= {f["file"] for f in report["figures"]}
    slack = next(f for f in report["figures"] if f["file"] == "slack_by_corner.png")
    assert slack["commands"] == [report["stages"]["sta"]["command"], report["stages"]["place"]["command"]]
    _check_figures(report, out, md)
    lines = brief(load(build)).splitlines()
    assert 5 <= len(lines) <= 8
    assert lines[4] == "timing post: slack slow -1.250 / typical 6.500 ns after placement (utilization 0.60)"


def test_area_falls_back_to_blocks_for_a_single_module_top(tmp_path):
    flat = {**SYNTH, "macros": {"count": 0, "bits": 0, "instances": []},
            "hierarchy": {"engines": [{"name": "(top-level logic)", "module": "mac_sram", "area_um2": 1741.0, "cells": 1283}]}}
    report = write_report(_build(tmp_path, {"synth/synth.json": flat, "blocks/blocks.json": BLOCKS}), tmp_path / "r")
    md = (tmp_path / "r" / "report.md").read_text()
    by_file = {f["file"]: f for f in report["figures"]}
    assert by_file["area_by_engine.png"]["commands"] == [BLOCKS["command"]]
    assert by_file["memory_bits.png"]["commands"] == [BLOCKS["command"]]     # no macros in the top: the engines' bits
    assert "No msh_sram / msh_rom instances: 0 macro bits." in md
    _check_figures(report, tmp_path / "r", md)


def test_stale_figure_is_removed_and_mixed_tops_are_flagged(tmp_path):
    out = tmp_path / "report"
    write_report(_build(tmp_path, {"synth/synth.json": SYNTH, "sta/sta.json": STA}), out)
    assert (out / "area_by_engine.png").exists()
    (tmp_path / "build" / "synth" / "synth.json").unlink()
    (tmp_path / "build" / "sta" / "sta.json").write_text(json.dumps({**STA, "top": "other"}))
    report = write_report(tmp_path / "build", out)
    assert not (out / "area_by_engine.png").exists() and (out / "slack_by_corner.png").exists()
    assert report["summary"]["warnings"] == []
    _build(tmp_path, {"sim/summary.json": BLOCK_SIM})
    report = write_report(tmp_path / "build", out)
    assert report["summary"]["warnings"] and "sta `other`" in (out / "report.md").read_text()
    assert brief(load(tmp_path / "build")).splitlines()[-1].startswith("warning    : the stages describe different designs")


@pytest.mark.parametrize("text, error", [("{half", "Expecting"), ("[1, 2]", "a JSON object"), ('{"top": "x"}', "no area")])
def test_unreadable_input_is_reported(tmp_path, text, error):
    (tmp_path / "synth").mkdir()
    (tmp_path / "synth" / "synth.json").write_text(text)
    entry = load(tmp_path)["synth"]
    assert entry["status"] == "unreadable" and error in entry["error"] and entry["data"] is None


def test_figure_table_names_are_unique_pngs():
    assert all(name.endswith(".png") and section in {"speed", "size", "timing", "placement"}
               for name, (section, _) in FIGURES.items())


def test_flow_runtime_is_summed_against_the_goal(tmp_path):
    build = _build(tmp_path, {"synth/synth.json": {**SYNTH, "runtime_s": 900.0}, "sta/sta.json": {**STA, "runtime_s": 120.0},
                              "place/place.json": PLACE})
    write_report(build, tmp_path / "report")
    md = (tmp_path / "report" / "report.md").read_text()
    assert "| total, wall clock | 2,520 (42.0 min, over the 30-minute goal; steps that ran side by side count once) | |" in md


def test_flow_runtime_counts_steps_side_by_side_once():
    synth = {"runtime_s": 500.0, "finished_unix": 1000.0}
    sta = {"runtime_s": 200.0, "finished_unix": 1210.0}              # 1010 .. 1210
    place = {"runtime_s": 1000.0, "finished_unix": 2005.0}           # 1005 .. 2005, beside STA
    assert flow_seconds([synth, sta, place]) == 500 + 1000
    assert flow_seconds([synth, {"runtime_s": 200.0}, place]) == 500 + 200 + 1000     # no timestamp: added
    old_synth = {"runtime_s": 500.0, "finished_unix": 10.0}          # reused from an earlier run: its own span
    assert flow_seconds([old_synth, sta, place]) == 500 + 1000


def test_blocks_log_paths_inside_and_outside_the_repository(tmp_path):
    """`flow.blocks --out` may point anywhere: logs inside the repository are shown relative to it."""
    from flow.blocks import REPO, _shown
    assert _shown(REPO / "build" / "blocks" / "res_mixer" / "pytest.log") == "build/blocks/res_mixer/pytest.log"
    assert _shown(tmp_path / "pytest.log") == str((tmp_path / "pytest.log").resolve())
