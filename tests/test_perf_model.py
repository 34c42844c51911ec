"""perf/model.py against the RTL it models, and against the engines' own formulas.

The model is checked against independent sources, never against itself:

* recorded RTL runs (verification/perf_record.py): the chip emitted now (the tiny preset, or the one in
  $NANO_K3_PERF_PRESET, e.g. ``nano``: ~15 minutes whenever its RTL changes), simulated with the phase
  monitor once per RTL digest and re-simulated whenever the emitted RTL changes; three runs that vary
  seed, group size and length (``RUNS``), and one run of a tiny lane variant (``VARIANT``: other
  element-wise, norm, mixer and combine lanes; one more Verilator build, a few minutes). None of
  them is the run perf/model.py's empirical constants were read from (``perf.model.FITTED_RUN``). The
  claims checked are perf/model.py's own: every op predicted to the cycle except EMB's wait (SPEC §3
  read latency taken at its expectation) and ops a cycle late; the load phase, the finish and the
  memory beats exactly; the total within issue 16's 2 %.
* the MAC array's issue and scale-step formulas (hw/mac_array.py) and the chip preset's lane counts.

The bench's bookkeeping (monitor counts folded into the model's phases) is checked on a synthetic record.
"""
from __future__ import annotations

import dataclasses
import os

import pytest

from hw.program import Opc, program_for
from nano_k3.config import preset
from perf.model import PerfModel, chip_perf_params, model_for, op_phase
from verification.bench import MODEL_TOLERANCE, measured_phases
from verification.chip_run import run_length
from verification.chip_tb import PUBLIC_SEED, PROFILES, RunSpec
from verification.held_out import chip_for, held_out_runs

PRESET = os.environ.get("NANO_K3_PERF_PRESET", "tiny")
RUNS = [RunSpec(seq_len=run_length(preset(PRESET), 48), group=128, config=PRESET, seed=PUBLIC_SEED),
        RunSpec(seq_len=run_length(preset(PRESET), 48, 4 / 3), group=64, config=PRESET, seed=1),
        RunSpec(seq_len=run_length(preset(PRESET), 16), group=128, config=PRESET, seed=2)]
VARIANT = "tiny.narrow"
CASES = [(PRESET, r) for r in RUNS] + [(h.chip, h.run) for h in held_out_runs() if h.chip == VARIANT][:1]
RUN_IDS = [f"{r.name}-seed{r.seed}" if chip == PRESET else r.name for chip, r in CASES]
ONE_CYCLE_LATE = 1        # perf/model.py: an op may end a cycle away (tiny: position 0's first RMS, after the ROM check)


@pytest.fixture(scope="module")
def recorded(tmp_path_factory) -> dict[str, dict]:
    """Run name -> the recorded RTL run of its chip (``CASES``) emitted from the current sources."""
    from rtl_gen import emit
    from verification.perf_record import recorded_runs
    got = {}
    for chip in dict.fromkeys(c for c, _ in CASES):
        rtl = emit("chip", tmp_path_factory.mktemp("rtl") / "rtl", chip_for(chip))
        got.update(recorded_runs(rtl.verilog.parent, [r for c, r in CASES if c == chip]))
    return got


def _model(chip: str, run: RunSpec) -> PerfModel:
    return model_for(chip_for(chip), run.model_config().group_size)


@pytest.mark.parametrize("chip,run", CASES, ids=RUN_IDS)
def test_totals_and_beats_match_rtl(recorded, chip, run):
    """The monitor's phases add up to the testbench's cycle count; the model's read and write beats are the
    memory model's counts exactly; its total is within issue 16's 2 % (``bench.MODEL_TOLERANCE``; measured
    on tiny: +0.15 % (s12), +0.08 % (s16), +0.33 % (s4), a margin of 6x or more)."""
    rec, m = recorded[run.name], _model(chip, run)
    rep, ops = rec["report"], program_for(run.model_config()).ops
    meas = measured_phases(rec["phases"], ops)
    assert sum(meas.values()) == rep["cycles"], f"monitor {sum(meas.values())} vs testbench {rep['cycles']} cycles"
    assert (m.read_beats(run.seq_len), m.write_beats(run.seq_len)) == (rep["read_beats"], rep["write_beats"])
    err = (m.total(run.seq_len) - rep["cycles"]) / rep["cycles"]
    print(f"{run.name} seed {run.seed}: RTL {rep['cycles']}, model {m.total(run.seq_len)} ({100 * err:+.3f} %)")
    assert abs(err) <= MODEL_TOLERANCE, f"model {m.total(run.seq_len)} vs RTL {rep['cycles']}: {100 * err:+.2f} %"


@pytest.mark.parametrize("chip,run", CASES, ids=RUN_IDS)
def test_ops_to_the_cycle(recorded, chip, run):
    """Every op but EMB, at every position, within ``ONE_CYCLE_LATE`` of the RTL; the load phase (summed over
    its regions) and the finish exactly."""
    rec, m = recorded[run.name], _model(chip, run)
    ops = program_for(run.model_config()).ops
    off = []
    for t in range(run.seq_len):
        for oc in m.position(t):
            got = rec["phases"]["ops"][t][oc.index]
            if oc.opc != Opc.EMB.name and oc.cycles != got:
                off.append((abs(oc.cycles - got), t, oc.index, oc.opc, oc.name, oc.cycles, got))
    print(f"{run.name}: {len(off)} (position, op) pairs off: {sorted(off, reverse=True)[:5]}")
    worst = max(off, default=None)
    assert worst is None or worst[0] <= ONE_CYCLE_LATE, \
        "position {1}, op {2} ({3} {4}): model {5}, RTL {6} cycles".format(*worst)
    meas, pred = measured_phases(rec["phases"], ops), m.phases(run.seq_len)
    load = [sum(v for k, v in d.items() if k.startswith("load.")) for d in (pred, meas)]
    assert load[0] == load[1] and pred["finish"] == meas["finish"], (load, pred["finish"], meas["finish"])


def _emb_errors(rec: dict, m: PerfModel, run: RunSpec) -> list[int]:
    k = next(i for i, op in enumerate(m.ops) if op.opc == Opc.EMB)
    return [m.position(t)[k].cycles - rec["phases"]["ops"][t][k] for t in range(run.seq_len)]


def _emb_bound(run: RunSpec) -> int:
    """EMB waits for two round trips whose latency the model takes at its expectation: the token's
    (jitter 0..J, expected J/2) and the row's (the last of its reads, 0..J): at most J/2 + J away, and a
    cycle of rounding."""
    J = PROFILES[run.profile].timing.jitter
    return J // 2 + J + 1


@pytest.mark.parametrize("chip,run", CASES, ids=RUN_IDS)
def test_embedding_wait_within_jitter(recorded, chip, run):
    """EMB at every position after the first: model and RTL differ by no more than the jitter can make them."""
    errs = _emb_errors(recorded[run.name], _model(chip, run), run)
    print(f"{run.name}: EMB model - RTL per position {errs}")
    assert max(map(abs, errs[1:]), default=0) <= _emb_bound(run), errs


@pytest.mark.xfail(PRESET == "tiny", strict=True,
                   reason="perf/model.py times position 0's row from the tensor block's end; the tiny chip starts "
                          "position 0 after its longer ROM check, when the row is in: 35 cycles too many")
@pytest.mark.parametrize("run", RUNS, ids=RUN_IDS[:len(RUNS)])
def test_first_embedding_wait_within_jitter(recorded, run):
    err = _emb_errors(recorded[run.name], _model(PRESET, run), run)[0]
    assert abs(err) <= _emb_bound(run), f"{run.name}: EMB at position 0, model - RTL = {err} cycles"


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
