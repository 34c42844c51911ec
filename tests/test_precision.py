"""nano_k3.precision's router gate: every image's closest router decision, reported and failed below 2x."""
import json

from nano_k3 import divergence, precision
from nano_k3.config import preset


def _rows(*routers):
    return {"rows": [{"position": t, "router": r} for t, r in enumerate(routers)]}


def test_closest_router_is_the_smallest_margin_over_key_error(monkeypatch):
    monkeypatch.setattr(divergence, "run", lambda cfg, seed, positions: _rows(
        {"L0": {"margin": 1e-3, "key_abs_err": 1e-6, "flip": False},
         "L1": {"margin": 4e-5, "key_abs_err": 1e-5, "flip": False}},
        {"L0": {"margin": 2e-5, "key_abs_err": 1e-5, "flip": False},
         "L1": {"margin": 1.0, "key_abs_err": 0.0, "flip": False}}))
    r = precision.closest_router(preset("tiny"), 3, 2)
    assert (r["position"], r["layer"], r["seed"]) == (1, "L0", 3) and abs(r["ratio"] - 2.0) < 1e-12


def test_a_changed_decision_scores_zero_and_fails_the_run(monkeypatch, tmp_path, capsys):
    monkeypatch.setattr(divergence, "run", lambda cfg, seed, positions: _rows(
        {"L0": {"margin": 1e-3, "key_abs_err": 1e-6, "flip": True}}))
    assert precision.closest_router(preset("tiny"), 0, 1)["ratio"] == 0.0
    out = tmp_path / "p.json"
    assert precision.main(["--seeds", "1", "--config", "tiny", "--positions", "4", "--groups", "64",
                           "--json", str(out)]) == 1
    assert "closest router decision: seed 0 g64 pos 0 L0" in capsys.readouterr().out
    data = json.loads(out.read_text())
    assert data["closest_router"]["ratio"] == 0.0 and data["pass"] is False


def test_tiny_model_passes_with_its_router_reported(tmp_path):
    out = tmp_path / "p.json"
    assert precision.main(["--seeds", "1", "--config", "tiny", "--positions", "8", "--json", str(out)]) == 0
    data = json.loads(out.read_text())
    r = data["closest_router"]
    assert r["ratio"] >= data["bounds"]["min_router_ratio"] == 2.0 and r["group"] in (64, 128)
