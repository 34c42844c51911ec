"""hw/perf_model.py: totals, phases, monotonicity, and the formulas it shares with the engines.

Pure Python (no simulator). The model's agreement with the RTL is checked by the bench
(verification/bench.py, within 10 % per run) and its bookkeeping here with a synthetic monitor record.
"""
from __future__ import annotations

import dataclasses

import pytest

from perf.model import PerfModel, chip_perf_params, model_for, op_phase
from hw.program import Opc, program_for
from nano_k3.config import preset

# RTL measurement this model was calibrated on (verification/bench.py, nano-g128-s48-long, seed 20260706)
NANO_LONG_CYCLES = 121_441


@pytest.mark.parametrize("config,group,seq_len", [("nano", 128, 48), ("nano", 64, 64), ("tiny", 64, 16)],
                         ids=["nano-g128-s48", "nano-g64-s64", "tiny-g64-s16"])
def test_phase_sums_equal_total(config, group, seq_len):
    m = model_for(config, group)
    ph = m.phases(seq_len)
    assert sum(ph.values()) == m.total(seq_len)
    assert m.cycles_per_token(seq_len) == m.total(seq_len) / seq_len
    assert all(v > 0 for v in ph.values()), ph
    per_pos = sum(sum(o.cycles for o in m.position(t)) for t in range(seq_len))
    load = sum(v for k, v in ph.items() if k.startswith("load."))
    assert load + per_pos + ph["finish"] == m.total(seq_len)
    print(f"{config}-g{group}-s{seq_len}: {m.total(seq_len)} cycles, {m.cycles_per_token(seq_len):.1f} cycles/token")


def test_nano_long_run_total_near_rtl():
    """The calibrated model predicts the public long run within the issue's 10 % (the bench re-measures)."""
    m = model_for("nano", 128)
    err = (m.total(48) - NANO_LONG_CYCLES) / NANO_LONG_CYCLES
    assert abs(err) < 0.10, f"model {m.total(48)} vs RTL {NANO_LONG_CYCLES}: {100 * err:+.2f} %"


def test_tiny_is_cheaper_than_nano():
    assert model_for("tiny").cycles_per_token(16) < model_for("nano").cycles_per_token(16)


@pytest.mark.parametrize("config", ["nano", "tiny"])
def test_monotonic_in_seq_len(config):
    """MLA attends over every cached position: a later position costs more, the run costs more."""
    m = model_for(config)
    pos = [sum(o.cycles for o in m.position(t)) for t in range(m.cfg.max_seq)]
    assert all(b > a for a, b in zip(pos, pos[1:]))
    totals = [m.total(n) for n in range(1, m.cfg.max_seq + 1)]
    assert all(b > a for a, b in zip(totals, totals[1:]))


def test_every_op_has_a_phase_and_a_cost():
    for name in ("nano", "tiny"):
        ops = program_for(preset(name)).ops
        phases = op_phase(list(ops))
        emb = next(k for k, op in enumerate(ops) if op.opc == Opc.EMB)
        assert len(phases) == len(ops) and phases[emb] == "embed" and phases[-1] == "argmax"
        assert all(op.opc == Opc.PLD for op in ops[:emb])      # only parameter loads run before the row is in
        assert {p for p, op in zip(phases, ops) if op.name == "head"} == {"head"}
        m = PerfModel(preset(name))
        assert all(m.op_cycles(op, 0) > 0 for op in ops)


def test_engine_formulas_match_the_engines():
    """The MAC issue and scale-step formulas are the MacArray's own; a wider array issues fewer cycles, and
    fewer scale lanes cost cycles only where a group's scale steps outnumber its reads or its chunks."""
    from hw.mac_array import mac_array_params_for
    from hw.params import preset as chip_preset
    mp = mac_array_params_for(chip_preset("nano"))
    m = model_for("nano", 128)
    chip = chip_preset("nano")
    assert (m.hw.mac_lanes, m.hw.banks, m.hw.scale_lanes, m.hw.norm_lanes, m.hw.ew_lanes, m.hw.mix_lanes,
            m.hw.comb_lanes) == (mp.lanes, mp.store.banks, mp.scale_lanes, chip.norm_lanes, chip.ew_lanes,
                                 chip.mix_lanes, chip.comb_lanes)
    shapes = [(64, 2), (64, 8), (64, 32), (32, 64), (64, 64), (128, 64), (64, 128), (64, 512)]
    for k in (1, 4, 16, 64):
        mk = PerfModel(m.cfg, dataclasses.replace(m.hw, scale_lanes=k))
        pk = dataclasses.replace(mp, scale_lanes=k)
        for fi, fo in shapes:
            assert mk.issue_cycles(fi, fo) == pk.issue_cycles(fi, fo, min(128, fi)), (k, fi, fo)
            assert mk.scale_steps(fo) == pk.scale_steps(fo), (k, fo)
    mv = [op for op in m.ops if op.opc == Opc.MV and not op.head]
    one = PerfModel(m.cfg, dataclasses.replace(m.hw, scale_lanes=1))
    assert all(PerfModel(m.cfg, dataclasses.replace(m.hw, scale_lanes=k)).mac_cycles(op) == m.mac_cycles(op)
               for op in mv for k in (16, 64))
    assert all(one.mac_cycles(op) > m.mac_cycles(op) for op in mv if op.fan_out > 1)
    narrow = PerfModel(m.cfg, dataclasses.replace(m.hw, mac_lanes=64, banks=4))
    head = next(op for op in m.ops if op.opc == Opc.MV and op.head)
    assert narrow.issue_cycles(64, 512) > m.issue_cycles(64, 512)
    assert narrow.op_cycles(head, 0) >= m.op_cycles(head, 0)


def test_bench_fold_and_error():
    """The bench folds monitor counts into the model's phases and computes the error per phase."""
    from verification.bench import compare, measured_phases, port_accounting
    from verification.phase_monitor import LOAD_REGIONS, PORT_CLASSES
    ops = program_for(preset("nano")).ops
    n = len(PORT_CLASSES)
    rec = {"load": {r: {"cycles": 10, "port": [0, 10, 0, 0, 0]} for r in LOAD_REGIONS},
           "ops": [[2] * len(ops), [3] * len(ops)], "op_port": [[0, 0, 0, 0, 5]] * len(ops),
           "finish": {"cycles": 4, "port": [1, 0, 0, 3, 0]}}
    meas = measured_phases(rec, ops)
    assert sum(meas.values()) == 10 * len(LOAD_REGIONS) + 5 * len(ops) + 4
    assert meas["argmax"] == 5 and meas["load.tensors"] == 10
    rows = {r["phase"]: r for r in compare(meas, {**meas, "head": 2 * meas["head"]})}
    assert rows["head"]["error"] == 1.0 and rows["embed"]["error"] == 0.0
    port = port_accounting(rec, ops)
    assert sum(port["total"].values()) == 10 * len(LOAD_REGIONS) + 5 * len(ops) + 4 and len(port["total"]) == n


def test_params_rejected_with_the_bad_value():
    with pytest.raises(ValueError, match="mac_lanes.*48"):
        chip_perf_params(mac_lanes=48)
    with pytest.raises(ValueError, match="scale_lanes.*24"):
        chip_perf_params(scale_lanes=24)
    with pytest.raises(ValueError, match="scale_lanes must be at most mac_lanes=128, got 256"):
        chip_perf_params(scale_lanes=256)
    with pytest.raises(ValueError, match="seq_len.*65"):
        model_for("nano").phases(65)
