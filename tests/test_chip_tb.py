"""Unit tests of the whole-chip testbench's checks (verification/chip_tb.py) on synthetic data, no simulator."""
from __future__ import annotations

import numpy as np
import pytest

from nano_k3.config import TINY
from nano_k3.image import STATUS_DONE, plan_layout
from verification.chip_tb import (ARGMAX_GATE, COSINE_GATE, RSP_DONE, Observation, RunSpec, check_addr_errors,
                                  check_argmax_agreement, check_argmax_words, check_bit_exact, check_completion,
                                  check_cosine, check_dense_floor, check_done_order, check_status,
                                  compare_output_regions, first_divergence, output_span, precision, region_of)

SEED = 20260706
LAYOUT = plan_layout(TINY, 4)          # tiny, 4 positions: logits stride 256 B


def _logits(rows: int = 4, vocab: int = 64, seed: int = SEED) -> np.ndarray:
    return np.random.default_rng(seed).integers(-2**20, 2**20, size=(rows, vocab)).astype(np.int32)  # (T, vocab)


# first divergence and bit exactness ---------------------------------------------------------------

def test_identical_logits_have_no_divergence():
    a = _logits()
    assert first_divergence(a, a.copy()) is None
    check, div = check_bit_exact(a, a.copy())
    assert check.passed and div is None


def test_first_divergence_names_position_index_and_both_values():
    ref = _logits()
    chip = ref.copy()
    chip[2, 5] += 1
    chip[3, 0] -= 7
    chip[3, 9] = 0
    div = first_divergence(chip, ref)
    assert (div.position, div.index, div.chip, div.ref) == (2, 5, int(ref[2, 5]) + 1, int(ref[2, 5]))
    assert (div.rows_mismatching, div.values_mismatching) == (2, 3)
    check, _ = check_bit_exact(chip, ref)
    assert not check.passed
    assert f"position 2, logit 5: chip {int(ref[2, 5]) + 1}, fixed model {int(ref[2, 5])}" in check.message
    assert "2 of 4 rows differ" in check.message


def test_first_divergence_is_row_major():
    ref = _logits()
    chip = ref.copy()
    chip[1, 60] += 1       # earlier row, later column: this one is first
    chip[2, 0] += 1
    assert (first_divergence(chip, ref).position, first_divergence(chip, ref).index) == (1, 60)


def test_first_divergence_rejects_shape_mismatch():
    with pytest.raises(ValueError, match="shape mismatch"):
        first_divergence(_logits(4), _logits(3))


def test_argmax_words_mismatch_names_position():
    ref = np.array([3, 7, 7, 1])
    assert check_argmax_words(ref.astype(np.uint32), ref).passed
    c = check_argmax_words(np.array([3, 7, 9, 2], np.uint32), ref)
    assert not c.passed and "position 2 is 9, fixed model 7" in c.message and "2 of 4" in c.message


# cosine and argmax agreement (SPEC §7) --------------------------------------------------------------

def test_precision_is_scale_invariant():
    gold = np.random.default_rng(1).standard_normal((5, 64)).astype(np.float32)    # (T, vocab)
    chip = np.round(gold * 4096).astype(np.int32)                                  # any per-row scale is allowed
    p = precision(chip, gold)
    assert p.min_cosine > 0.99999 and p.argmax_correct == 5 and p.argmax_agreement == 1.0
    assert check_cosine(p).passed and check_argmax_agreement(p).passed


def test_zero_row_scores_zero_and_fails_the_gate():
    gold = np.random.default_rng(2).standard_normal((3, 64))
    chip = np.round(gold * 1000).astype(np.int32)
    chip[1] = 0
    p = precision(chip, gold)
    assert p.min_cosine == 0.0 and p.worst_row == 1
    c = check_cosine(p)
    assert not c.passed and "row 1" in c.message and f"< gate {COSINE_GATE}" in c.message


def test_cosine_of_known_angle():
    gold = np.array([[1.0, 0.0, 0.0, 0.0]])
    chip = np.array([[1000, 1000, 0, 0]], np.int32)             # 45 degrees
    assert precision(chip, gold).min_cosine == pytest.approx(np.sqrt(0.5), abs=1e-12)


def test_argmax_pick_within_tolerance_counts_as_correct():
    rng = np.random.default_rng(3)
    gold = rng.standard_normal((2, 64))
    top = np.argmax(gold, axis=1)
    alt = [int(np.argsort(g)[-2]) for g in gold]
    gold[0, alt[0]] = gold[0, top[0]] - 0.001 * gold[0].std()     # near tie: either pick is correct
    chip = np.zeros((2, 64), np.int32)
    chip[0, alt[0]] = 10                                          # picks the near-tie runner-up
    chip[1, alt[1]] = 10                                          # picks a clearly worse logit
    p = precision(chip, gold)
    assert p.argmax_correct == 1 and p.argmax_agreement == 0.5
    c = check_argmax_agreement(p)
    assert not c.passed and "(1/2)" in c.message and f"< gate {ARGMAX_GATE}" in c.message


# protocol checks --------------------------------------------------------------------------------

def _status_write(cycle: int) -> tuple[int, int, int, int]:
    return (cycle, LAYOUT.status_addr, STATUS_DONE, 0xFFFF)


def test_status_must_be_the_last_write():
    row3 = LAYOUT.logits_addr + 3 * LAYOUT.logits_stride
    assert check_status(LAYOUT, STATUS_DONE, [(5, row3, 1, 0xFFFF), _status_write(9)]).passed
    c = check_status(LAYOUT, STATUS_DONE, [_status_write(5), (9, row3, 1, 0xFFFF)])
    assert not c.passed and "logits row 3 (logit 0)" in c.message and "accepted at cycle 5" in c.message
    c = check_status(LAYOUT, 0x12345678, [_status_write(5)])
    assert not c.passed and "0x12345678" in c.message


def test_done_must_follow_the_status_write():
    obs = Observation(run_cycle=0, done_cycle=10, writes=[_status_write(9)])
    assert check_done_order(LAYOUT, obs).passed
    same = Observation(run_cycle=0, done_cycle=9, writes=[_status_write(9)])
    c = check_done_order(LAYOUT, same)
    assert not c.passed and "DONE accepted at cycle 9, but the status write was accepted at cycle 9" in c.message
    late = Observation(run_cycle=0, done_cycle=10, writes=[_status_write(9), (12, LAYOUT.argmax_addr, 0, 0xF)])
    c = check_done_order(LAYOUT, late)
    assert not c.passed and "after DONE" in c.message and "argmax words" in c.message


def test_completion_reports_timeout_and_unknown_responses():
    assert check_completion(Observation(run_cycle=3, done_cycle=50, responses=[(50, RSP_DONE)]), 100).passed
    c = check_completion(Observation(run_cycle=3, timeout=True), 100)
    assert not c.passed and c.message.startswith("timeout: no DONE within 100 cycles")
    c = check_completion(Observation(), 100)
    assert not c.passed and "RUN was never accepted" in c.message
    c = check_completion(Observation(run_cycle=3, done_cycle=50, responses=[(20, 0xBAD), (50, RSP_DONE)]), 100)
    assert not c.passed and "0x00000bad at cycle 20" in c.message


def test_address_error_and_dense_floor_messages():
    assert check_addr_errors(LAYOUT, 0, None).passed
    c = check_addr_errors(LAYOUT, 2, (44, "read", 0x8))
    assert not c.passed and "2 address error(s)" in c.message and "0x8 (not 16-byte aligned)" in c.message
    c = check_addr_errors(LAYOUT, 1, (7, "write", LAYOUT.size))
    assert "outside" in c.message
    assert check_dense_floor(100, 1600).passed               # exactly the floor is enough
    c = check_dense_floor(99, 1600)
    assert not c.passed and "1584 B < the dense-tensor floor 1600 B" in c.message


def test_output_region_comparison_names_the_byte():
    lo, hi = output_span(LAYOUT)
    a = bytes(range(256)) * ((hi - lo) // 256) + bytes((hi - lo) % 256)
    assert compare_output_regions(a, a, LAYOUT).passed
    b = bytearray(a)
    off = LAYOUT.logits_stride + 4 * 7 + 2                   # row 1, logit 7
    b[off] ^= 0xFF
    c = compare_output_regions(a, bytes(b), LAYOUT)
    assert not c.passed and "logits row 1 (logit 7)" in c.message and "1 bytes differ" in c.message


def test_region_names():
    assert region_of(LAYOUT, 0) == "header"
    assert region_of(LAYOUT, LAYOUT.status_addr) == "status block"
    assert region_of(LAYOUT, LAYOUT.logits_addr + 2 * LAYOUT.logits_stride + 8) == "logits row 2 (logit 2)"
    assert region_of(LAYOUT, LAYOUT.scratch_addr + 16).startswith("scratch")


def test_run_spec_validates_and_names():
    r = RunSpec(seq_len=48)
    assert r.name == "nano-g128-s48-long" and r.prompt_index == 0 and r.timing.jitter == 12
    s = RunSpec(seq_len=16, profile="short")
    assert s.prompt_index == 1 and s.timing.ready_drop == 0.05
    assert RunSpec(seq_len=64, group=64).name == "nano-g64-s64-long"
    assert RunSpec.from_dict(s.to_dict()) == s
    with pytest.raises(ValueError, match="profile"):
        RunSpec(seq_len=16, profile="fast")
    with pytest.raises(ValueError, match="seq_len"):
        RunSpec(seq_len=65)
