"""verification/bench.py: the priced area after repair comes from the sign-off of the same synthesis."""
import json

import pytest

from verification.bench import area

SYNTH = {"top": "msh_chip_top", "rtl": {"config_sha256": "abc"}, "cells": {"count": 10}, "macros": {"bits": 8},
         "area": {"logic_um2": 2_300_000.0, "macro_um2": 1_450_000.0, "total_um2": 3_750_000.0,
                  "budget_um2": 4_000_000.0}}


def _write(tmp_path, signoff: dict | None) -> dict:
    (tmp_path / "synth").mkdir()
    (tmp_path / "synth" / "synth.json").write_text(json.dumps(SYNTH))
    if signoff is not None:
        (tmp_path / "signoff").mkdir()
        (tmp_path / "signoff" / "signoff.json").write_text(json.dumps(signoff))
    return area(tmp_path / "synth" / "synth.json")


def test_area_after_repair_adds_the_repaired_cells_to_the_macro_price(tmp_path):
    a = _write(tmp_path, {"synth_config_sha256": "abc", "signed_off": True, "std_cell_area_um2": 2_600_000.0})
    r = a["after_repair"]
    assert a["total_mm2"] == pytest.approx(3.75)
    assert r["status"] == "signed off" and r["total_mm2"] == pytest.approx(2.6 + 1.45)
    assert r["within_budget"] is False and r["budget_mm2"] == pytest.approx(4.0)


def test_area_after_repair_needs_a_signoff_of_the_same_rtl(tmp_path):
    a = _write(tmp_path, {"synth_config_sha256": "other", "signed_off": True, "std_cell_area_um2": 1.0})
    assert a["after_repair"]["status"] == "no sign-off" and "another RTL" in a["after_repair"]["reason"]
    assert "total_mm2" not in a["after_repair"]


def test_area_after_repair_without_a_signoff_names_the_command(tmp_path):
    r = _write(tmp_path, None)["after_repair"]
    assert r["status"] == "no sign-off" and "make signoff" in r["command"]


def test_power_is_the_chip_power_of_this_synthesis_at_the_bench_token_rate(tmp_path):
    """verification.bench.power: make chip-power's record beside the synthesis, divided by the bench's own tokens/s;
    a record of another synthesis, or none, says so and names the command."""
    from verification.bench import power
    synth = tmp_path / "synth" / "synth.json"
    synth.parent.mkdir()
    synth.write_text(json.dumps({**SYNTH, "inputs_sha256": "s1"}))
    assert power(synth, 40_000.0)["status"] == "not measured"
    rec = {"synth_inputs_sha256": "s1", "total_mW": 200.0, "corner": "typical",
           "engines": [{"engine": "core/mac", "total_mW": 150.0}, {"engine": "(core own logic)", "total_mW": 50.0}],
           "default_activity": {"what": "OpenSTA's default"}}
    (tmp_path / "chip_power").mkdir()
    (tmp_path / "chip_power" / "chip_power.json").write_text(json.dumps(rec))
    p = power(synth, 40_000.0)
    assert p["status"] == "measured" and p["energy_uJ_per_token"] == pytest.approx(0.2 / 40_000 * 1e6)
    assert p["tokens_per_s_per_W"] == pytest.approx(200_000.0) and p["by_engine_mW"]["core/mac"] == 150.0
    (tmp_path / "chip_power" / "chip_power.json").write_text(json.dumps({**rec, "synth_inputs_sha256": "s0"}))
    other = power(synth, 40_000.0)
    assert other["status"] == "not measured" and "another synthesis" in other["reason"]
    assert "make chip-power" in other["command"]


def test_a_synthesis_folder_given_as_synth_is_refused_before_any_simulation(tmp_path, capsys):
    from verification.bench import main
    (tmp_path / "rtl").mkdir()
    (tmp_path / "rtl" / "config.json").write_text("{}")
    (tmp_path / "synth").mkdir()
    with pytest.raises(SystemExit) as e:
        main(["--rtl", str(tmp_path / "rtl"), "--synth", str(tmp_path / "synth"), "--out", str(tmp_path / "b")])
    assert e.value.code == 2 and "synth.json" in capsys.readouterr().err
    assert not (tmp_path / "b").exists()
