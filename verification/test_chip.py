"""pytest tests of the whole-chip testbench (``verification/chip_run.py``) and of ``make sim``'s driver.

The tests prove the checks work in both directions on ``verification/wrappers/protocol_fixture.v`` —
test equipment that copies preloaded expected outputs and computes nothing (never reported as the
chip) — with the tiny config for speed; ``test_chip_nano_short`` runs the real nano chip on the short
profile. The cocotb test they run is ``verification.chip_run.chip_run``.
"""
from __future__ import annotations

from pathlib import Path
from typing import Sequence

import pytest

from verification.chip_run import BUILD_ARGS, chip_sources, run_chip_sim  # noqa: F401  (BUILD_ARGS, chip_sources: used by the other chip test files)
from verification.chip_tb import RunSpec, compare_output_regions

FIXTURE = Path(__file__).resolve().parent / "wrappers" / "protocol_fixture.v"
FIXTURE_TOP = "protocol_fixture"


def fixture_runs(seq_len: int = 16, profiles: Sequence[str] = ("long",), **kw) -> list[RunSpec]:
    return [RunSpec(seq_len=seq_len, profile=p, config="tiny", seed=7, expected_in_scratch=True, **kw)
            for p in profiles]


def _failed(report: dict) -> dict[str, str]:
    return {c["name"]: c["message"] for c in report["checks"] if not c["passed"]}


def test_fixture_passes_every_profile():
    """A protocol-correct run passes every check under each timing profile, and the random-initial-
    state re-run of the short run writes byte-identical outputs."""
    runs = fixture_runs(profiles=("long", "short", "elastic"))
    normal = run_chip_sim("chip-fixture", [FIXTURE], FIXTURE_TOP, runs)
    for name, r in normal.reports.items():
        print(f"{name}: {r['cycles']} cycles, {r['read_beats']} reads, {r['write_beats']} writes, "
              f"stalls {r['stall_cycles']}, min cos {r['min_cosine']:.6f}")
    assert normal.passed, {n: _failed(r) for n, r in normal.reports.items()} or f"no reports; see {normal.log}"
    short, elastic = normal.reports["tiny-g64-s16-short"], normal.reports["tiny-g64-s16-elastic"]
    assert short["stall_cycles"] > 0 and short["timing"]["ready_drop"] == 0.05
    assert elastic["cycles"] > short["cycles"], "base latency 48 must cost cycles on a one-read-at-a-time copier"
    rr = run_chip_sim("chip-fixture", [FIXTURE], FIXTURE_TOP, fixture_runs(profiles=("short",)),
                      rand_reset=True)
    assert rr.passed, {n: _failed(r) for n, r in rr.reports.items()} or f"no reports; see {rr.log}"
    (name, rep), = rr.reports.items()
    assert rep["rand_reset"] and name == "tiny-g64-s16-short-randreset"
    from nano_k3.config import TINY
    from nano_k3.image import plan_layout
    same = compare_output_regions(normal.outputs["tiny-g64-s16-short"], rr.outputs[name], plan_layout(TINY, 16))
    assert same.passed, same.message


# Each broken fixture must fail exactly the named check, with a message that names the problem. The
# faults are switched on by plusargs (same effect as the fixture's defines), so one build serves all.
VARIANTS = {
    "corrupt_logit": ("+CORRUPT_LOGIT", "bit_exact", "position 1, logit 8"),
    "status_early": ("+STATUS_EARLY", "status", "is not the status word"),
    "done_early": ("+DONE_EARLY", "done_after_status", "but the status write was accepted at cycle"),
    "misaligned": ("+MISALIGNED", "addr_errors", "address 0x8 (not 16-byte aligned)"),
    "below_floor": ("+SKIP_TENSORS", "dense_floor", "< the dense-tensor floor"),
    "hang": ("+HANG", "done", "timeout: no DONE within 40000 cycles"),
}
ALSO_FAILS = {"hang": {"done_after_status"}}   # no DONE: nothing to order either


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_fixture_fault_is_caught(variant):
    plusarg, check, words = VARIANTS[variant]
    # the copy of tiny s16 takes ~10k cycles; a 40k limit keeps the hang variant short
    res = run_chip_sim("chip-fixture", [FIXTURE], FIXTURE_TOP, fixture_runs(max_cycles=40_000), plusargs=[plusarg])
    assert len(res.reports) == 1, f"no report; see {res.log}"
    (rep,) = res.reports.values()
    failed = _failed(rep)
    print(f"{variant}: {failed}")
    assert not res.passed and res.n_failed == 1
    assert set(failed) == {check} | ALSO_FAILS.get(variant, set()), failed
    assert words in failed[check], failed[check]


@pytest.mark.parametrize("defines", [{}, {"CORRUPT_LOGIT": 1, "STATUS_EARLY": 1, "DONE_EARLY": 1, "MISALIGNED": 1,
                                          "HANG": 1}, {"READ_TENSORS": 0}], ids=["plain", "all-faults", "no-tensors"])
def test_fixture_lint_clean(defines):
    """The fixture is hand-written Verilog: every rule on, no warnings, with and without its fault defines."""
    from verification.runner import lint
    args = [f"-G{k}={v}" if k == "READ_TENSORS" else f"-D{k}={v}" for k, v in defines.items()]
    r = lint([FIXTURE], FIXTURE_TOP, extra_args=args)
    assert r.clean, r.output


def test_chip_sim_summary_on_fixture(tmp_path):
    """The `make sim` driver end to end on the fixture: summary schema, per-run seed and time, elasticity,
    random-reset check, the announced run count."""
    import json
    from verification.chip_sim import run_chip
    from verification.sim import write_summary
    rtl = tmp_path / "rtl"
    rtl.mkdir()
    (rtl / "protocol_fixture.f").write_text(f"{FIXTURE}\n")
    cfg = {"block": "chip", "top": FIXTURE_TOP, "files": {"filelist": "protocol_fixture.f"}}
    runs = fixture_runs(profiles=("long", "short", "elastic"))
    summary = run_chip(rtl, tmp_path, cfg, runs=runs, seed=7, sim_name="chip-fixture", macros="none")
    d = json.loads(write_summary(summary, tmp_path).read_text())
    assert d["verdict"] == "pass", [r["checks"] for r in d["runs"] if not r["passed"]]
    names = ["tiny-g64-s16-long", "tiny-g64-s16-short", "tiny-g64-s16-elastic", "tiny-g64-s16-short-randreset"]
    assert [r["name"] for r in d["runs"]] == [t["name"] for t in d["details"]] == names
    assert all(r["seed"] == 7 and r["time_s"] > 0 for r in d["runs"]), [(r["seed"], r["time_s"]) for r in d["runs"]]
    assert d["tests"] == 4 and d["seeds"] == [7] and d["replay"].endswith("--seed 7")
    long = d["runs"][0]
    assert long["cycles_per_token"] == long["cycles"] / 16 and long["tokens_per_s"] == 1e8 / long["cycles_per_token"]
    assert d["elasticity"]["ratio"] > 1.0 and d["rand_reset"]["passed"]
    assert d["argmax_agreement_pooled"]["rows"] == 32 and d["lint"]["errors"] == 0
    assert d["throughput"] is None        # seed 7 is not SPEC §8's public seed


def test_default_plan_covers_spec_10():
    """`make sim`'s run set: three seeds (public, fresh, fresh + 1), both group sizes at each seed, public
    and stretched lengths, every timing profile, unique names; the first run is SPEC §8's throughput run."""
    from nano_k3.config import preset
    from verification.chip_sim import default_runs
    from verification.chip_tb import PUBLIC_SEED
    fresh = 424242
    for config in ("nano", "tiny"):
        runs = default_runs(config, fresh)
        print(config, [(r.name, r.seed) for r in runs])
        assert len({r.name for r in runs}) == len(runs)
        seeds = {r.seed for r in runs}
        assert seeds == {PUBLIC_SEED, fresh, fresh + 1}
        for s in seeds:
            assert {r.model_config().group_size for r in runs if r.seed == s} == {64, 128}, s
        assert {r.profile for r in runs} == {"long", "short", "elastic"}
        assert (runs[0].seed, runs[0].profile, runs[0].model_config().group_size) == (PUBLIC_SEED, "long", 128)
    nano, tiny = default_runs("nano", fresh), default_runs("tiny", fresh)
    assert {r.seq_len for r in nano} == {16, 24, 48, 64}        # public 16, 48; stretched 24 (x1.5, x0.5), 64
    assert max(r.seq_len for r in tiny) == preset("tiny").max_seq and tiny[0].seq_len == 12     # 48 x 16/64


def test_run_length_is_spec_10():
    """SPEC §10: max(8, min(64, round(s x stretch))), scaled to a preset's max_seq."""
    from nano_k3.config import NANO, TINY
    from verification.chip_run import run_length
    assert [run_length(NANO, 48, k) for k in (1.0, 4 / 3, 2.0, 0.1, 0.5)] == [48, 64, 64, 8, 24]
    assert [run_length(NANO, 16, k) for k in (1.0, 1.5, 0.25)] == [16, 24, 8]
    assert [run_length(TINY, 48), run_length(TINY, 48, 4 / 3), run_length(TINY, 16)] == [12, 16, 4]


@pytest.mark.nano
def test_chip_nano_short(tmp_path):
    """The real chip, nano short profile (16 positions); and the trained image in generate mode (issue 19):
    a 4-token prompt of held-out text, then 12 positions that read the chip's own argmax, token array and
    logits bit-exact with the fixed-point model's greedy decode."""
    from hw.params import preset
    from nano_k3.corpus import TRAINED_DIR
    from nano_k3.image import read_image
    from rtl_gen import emit, read_filelist
    rtl = emit("chip", tmp_path / "rtl", preset("nano"))
    sources = chip_sources(read_filelist(rtl.filelist))
    prompt = tuple(int(t) for t in read_image((TRAINED_DIR / "nano.bin").read_bytes()).tokens[:4])
    runs = [RunSpec(seq_len=16, profile="short"), RunSpec(seq_len=16, profile="short", trained=True, prompt=prompt)]
    res = run_chip_sim("chip-nano-short", sources, rtl.top, runs, rtl_dir=rtl.verilog.parent)
    assert res.passed, {n: _failed(r) for n, r in res.reports.items()} or f"no reports; see {res.log}"
    gen = res.reports["nano-g128-s16-short-trained-gen4"]
    assert any(c["name"] == "generated_tokens" and c["passed"] for c in gen["checks"])
