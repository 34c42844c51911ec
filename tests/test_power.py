"""flow.power on a one-lane dequant_mac (the tiny preset with mac_lanes=1, ~7k cells, so the gate-level build
stays short): its netlist runs its own cocotb testbench with toggle counts, OpenSTA prices every cell at its
measured activity. The numbers must be positive, add up (columns to total, engines to chip, energy to power
over token rate) and differ from OpenSTA's default-activity figure; the coverage reader and the CLI refuse
bad inputs by name."""
from __future__ import annotations

import json
from dataclasses import replace

import pytest

from flow.activity import ActivityError, demangle, read_coverage
from flow.power import PowerError, main, measure_block, summarise, token_rate
from flow.power_sta import COLUMNS
from flow.synth import synthesize

CASES = "10"                # random cases of the testbench: activity needs a run, not coverage of every case
ROUNDING_MW = 1e-5          # the JSON rounds each figure to 1e-6 mW


@pytest.fixture(scope="module")
def measured(tmp_path_factory):
    from hw.params import preset
    from rtl_gen import emit
    work = tmp_path_factory.mktemp("power")
    emit("dequant_mac", work / "rtl", replace(preset("tiny"), mac_lanes=1))
    synthesize(work / "rtl", work / "synth", jobs=1)
    return measure_block(work / "synth", "dequant_mac", work / "dm", {"NANO_K3_DMAC_CASES": CASES})


def test_power_is_positive_and_adds_up(measured):
    print({k: measured[k] for k in ("cells", "cycles", "internal_mW", "switching_mW", "leakage_mW", "total_mW")},
          "default", measured["default_activity"]["total_mW"])
    assert measured["gatesim_passed"] and measured["cycles"] > 0 and measured["cells"] > 1000
    assert all(measured[f"{c}_mW"] > 0 for c in COLUMNS)
    assert abs(sum(measured[f"{c}_mW"] for c in COLUMNS) - measured["total_mW"]) < ROUNDING_MW
    assert measured["linearity"]["held"]
    assert 0 < measured["activity"]["mean"] < 2 and measured["activity"]["idle_cells"] < measured["cells"]


def test_measured_differs_from_default_activity(measured):
    """Leakage does not depend on activity, so it must agree; the dynamic power must not."""
    default = measured["default_activity"]
    assert abs(default["leakage_mW"] - measured["leakage_mW"]) < 1e-3 * measured["leakage_mW"]
    dynamic = measured["internal_mW"] + measured["switching_mW"]
    assert abs(dynamic - (default["internal_mW"] + default["switching_mW"])) > 0.05 * dynamic


def test_engines_sum_to_total_and_energy_is_power_over_rate(measured):
    other = {**measured, "block": "dequant_mac_copy"}
    rate = {"tokens_per_s": 1234.5, "source": "test"}
    rec = summarise([measured, other], rate, "tiny")
    assert abs(rec["total_mW"] - sum(e["total_mW"] for e in rec["engines"])) < ROUNDING_MW
    for c in COLUMNS:
        assert abs(rec[f"{c}_mW"] - sum(e[f"{c}_mW"] for e in rec["engines"])) < ROUNDING_MW
    assert rec["energy_uJ_per_token"] == pytest.approx(rec["total_mW"] * 1e-3 / 1234.5 * 1e6, rel=1e-5)
    assert rec["tokens_per_s_per_W"] == pytest.approx(1234.5 / (rec["total_mW"] * 1e-3), rel=1e-5)
    assert rec["measured"] == "total_mW" and rec["default_activity_total_mW"] != rec["total_mW"]


def _point(hier: str, name: str, n: int, page: str = "v_toggle/NAND2_X1") -> str:
    return f"C '\x01t\x02toggle\x01page\x02{page}\x01o\x02{name}\x01h\x02{hier}' {n}\n"


def test_coverage_reader(tmp_path):
    cov = tmp_path / "coverage.dat"
    cov.write_text("# SystemC::Coverage-3\n" + _point("top", "clk:0->1", 10) + _point("top", "clk:1->0", 10)
                   + _point("top.u__02Ea___05F1", "ZN:0->1", 3) + _point("top.u__02Ea___05F1", "ZN:1->0", 2))
    act = read_coverage(cov, "top")
    assert act.cycles == 10 and act.pins == {"u.a__1": {"ZN": 5}} and act.cell_type["u.a__1"] == "NAND2_X1"
    assert act.rate("u.a__1", ["ZN"]) == 0.5 and demangle("x___05Fy") == "x__y"
    sub = tmp_path / "sub.dat"      # a cell inside a submodule instance: OpenSTA's a/b naming
    sub.write_text(_point("top", "clk:0->1", 4) + _point("top.part._7_", "Z:0->1", 2))
    assert read_coverage(sub, "top").pins == {"part/_7_": {"Z": 2}}
    with pytest.raises(ActivityError, match="no rising edge of clock port 'clk'"):
        read_coverage(cov, "other")
    summed = tmp_path / "summed.dat"
    summed.write_text(_point("top", "clk:0->1", 4) + _point("top._4*_", "ZN:0->1", 3))
    with pytest.raises(ActivityError, match="--coverage-per-instance"):
        read_coverage(summed, "top")
    with pytest.raises(ActivityError, match="--coverage-toggle"):
        read_coverage(tmp_path / "absent.dat", "top")


def test_bad_token_rate_is_named(tmp_path, capsys):
    with pytest.raises(PowerError, match="must be positive, got -3"):
        token_rate(-3.0, None)
    with pytest.raises(PowerError, match="run make bench first"):
        token_rate(None, tmp_path / "bench.json")
    (tmp_path / "bench.json").write_text(json.dumps({"runs": [], "throughput_run": "x"}))
    assert main(["--bench", str(tmp_path / "bench.json"), "--out", str(tmp_path / "p")]) == 1
    assert "no throughput run with tokens_per_s (throughput_run = 'x'" in capsys.readouterr().err
    (tmp_path / "bench.json").write_text(json.dumps({"throughput": {"run": "nano-g128-s48-long", "tokens_per_s": 9.0}}))
    assert token_rate(None, tmp_path / "bench.json", "nano")["tokens_per_s"] == 9.0
    with pytest.raises(PowerError, match="run 'nano-g128-s48-long' is not of preset 'tiny'"):
        token_rate(None, tmp_path / "bench.json", "tiny")


def test_chip_level_blocks_are_refused_by_name(tmp_path, capsys):
    """Power runs per engine netlist (flow.blocks.emit_and_synthesise): the chip or an unknown name is refused
    before anything is emitted, naming the engines."""
    assert main(["--blocks", "chip", "nonesuch", "--tokens-per-s", "1", "--out", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert "unknown or chip-level blocks ['chip', 'nonesuch']: power runs per engine, one of [" in err
    assert not any(tmp_path.iterdir())
