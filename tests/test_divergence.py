"""Divergence tool: the error measure by hand, then a small run of both models through the CLI."""
import json

import numpy as np
import pytest

from nano_k3 import divergence
from nano_k3.config import NANO, TINY
from nano_k3.golden import trace_keys


def test_rel_err_is_inf_norm_relative():
    assert divergence.rel_err(np.array([1.0, 2.1]), np.array([1.0, 2.0])) == pytest.approx(0.05)
    assert divergence.rel_err(np.zeros(3), np.zeros(3)) == 0.0
    assert divergence.rel_err(np.ones(2), np.zeros(2)) == float("inf")


@pytest.mark.parametrize("reference", ["float32", "float64"])
def test_run_covers_every_trace_key_and_router(reference):
    cfg = TINY.with_group(64)
    res = divergence.run(cfg, seed=1, positions=6, reference=reference)
    assert len(res["rows"]) == 6 and res["reference"] == reference
    want = [k for k in trace_keys(cfg) if not k.endswith("moe.topk")]
    for row in res["rows"]:
        assert set(want) <= set(row["errors"])
        assert set(row["router"]) == {"L0", "L1"}
        assert row["errors"]["emb"] == 0.0                       # the embedding is exact
        assert max(row["errors"].values()) < 1e-3, row["errors"]  # the datapath tracks the golden
        assert row["one_minus_cos"] < 2e-5
        for r in row["router"].values():
            assert r["margin"] >= 0 and not r["flip"]


def test_float64_reference_removes_golden_rounding():
    """Against float64 the layer-1 router input error is what the datapath adds: ~1e-5 with int20 MAC
    inputs and 1,024-segment sigmoid / decay tables (it was ~1.5e-6 with int24 and deeper tables, which
    cost the 128-lane MAC array's area; docs/fixed_point.md "Precision")."""
    res = divergence.run(NANO.with_group(128), seed=18, positions=8, reference="float64")
    errs = [r["errors"]["L1.norm2"] for r in res["rows"]]
    assert np.median(errs) < 1.5e-5, errs


def test_cli_prints_table_and_writes_json(tmp_path, capsys):
    out = tmp_path / "div.json"
    assert divergence.main(["--seed", "0", "--config", "tiny", "--group", "64", "--positions", "4",
                            "--position", "3", "--json", str(out)]) == 0
    text = capsys.readouterr().out
    assert "seed 0  group 64" in text and "L1.moe.key" in text and "position 3: 1-cos" in text
    data = json.loads(out.read_text())
    assert len(data["rows"]) == 4 and data["rows"][3]["position"] == 3
    with pytest.raises(SystemExit):
        divergence.main(["--seed", "0", "--config", "tiny", "--positions", "4", "--position", "4"])
