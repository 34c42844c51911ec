"""ChipParams: validation messages, presets, derived accumulator widths, hashing; MacArrayParams.scale_lanes."""
import dataclasses

import pytest

from hw.mac_array import MacArrayParams, mac_array_params_for
from hw.params import PRESETS, ChipParams, preset, signed_bits


@pytest.mark.parametrize("field, value", [
    ("mac_lanes", 0), ("mac_lanes", 12), ("mac_lanes", 16.0), ("act_bits", 1), ("act_bits", True),
    ("scale_frac", 16), ("zero_bits", 3), ("max_fan_in", 511), ("max_fan_in", 0),
    ("clock_ns", 0.0), ("clock_ns", -1.0), ("clock_ns", float("nan")), ("clock_ns", "10"), ("name", "a b"),
    ("mac_banks", 0), ("mac_banks", 3), ("norm_lanes", 3), ("norm_lanes", 32), ("ew_lanes", 8), ("ew_lanes", 0), ("mix_lanes", 16), ("comb_lanes", 3),
])
def test_bad_value_is_rejected_with_the_value_in_the_message(field, value):
    with pytest.raises(ValueError) as e:
        dataclasses.replace(ChipParams(), **{field: value})
    assert field in str(e.value) and (repr(value) in str(e.value) or str(value) in str(e.value))


def test_frozen():
    with pytest.raises(dataclasses.FrozenInstanceError):
        ChipParams().mac_lanes = 8


def test_presets_and_unknown_name():
    assert preset("nano") == ChipParams()
    assert preset("nano").mac_lanes == 16 and preset("nano").clock_ns == 10.0
    for name, p in PRESETS.items():
        assert isinstance(p, ChipParams), name
    with pytest.raises(ValueError, match=r"unknown chip preset 'huge'.*nano"):
        preset("huge")


def test_model_is_the_model_preset_of_the_same_name():
    from nano_k3.config import NANO, TINY
    assert preset("nano").model is NANO and preset("tiny").model is TINY
    with pytest.raises(ValueError, match=r"no model preset named 'other'.*valid: ci, nano, tiny"):
        dataclasses.replace(ChipParams(), name="other").model


@pytest.mark.parametrize("lo, hi, bits", [(0, 0, 1), (-1, 0, 1), (0, 1, 2), (-128, 127, 8), (-129, 127, 9),
                                          (-128, 128, 9), (-(15 << 24), 15 << 24, 29)])
def test_signed_bits(lo, hi, bits):
    assert signed_bits(lo, hi) == bits


def test_nano_accumulator_widths():
    p = preset("nano")
    # act_bits 20 (format A): q·x pair 2·15·2^19 < 2^24; Σ over 512 rows 15·2^28 < 2^32;
    # |y| ≤ 512·2^15·15·2^19 = 15·2^43 < 2^47
    assert p.act_bits == 20
    assert (p.beat_qx_bits, p.beat_x_bits, p.beat_d_bits) == (25, 21, 25)
    assert (p.group_qx_bits, p.group_x_bits, p.group_d_bits) == (33, 29, 33)
    assert p.out_bits == 48


def test_out_bits_cover_the_extreme_sum_exactly():
    p = preset("nano")
    (a_lo, _), (s_lo, _) = p.act_range, p.scale_range
    extreme = p.max_fan_in * s_lo * (15 * a_lo)           # every row at the largest product
    assert extreme < (1 << (p.out_bits - 1)) and extreme >= (1 << (p.out_bits - 2))


def test_round_trip_and_digest():
    p = dataclasses.replace(ChipParams(), mac_lanes=8)
    assert ChipParams.from_dict(p.to_dict()) == p
    assert p.digest() == ChipParams.from_dict(p.to_dict()).digest() != ChipParams().digest()
    with pytest.raises(ValueError, match="unknown ChipParams fields"):
        ChipParams.from_dict({**p.to_dict(), "lanes": 3})


@pytest.mark.parametrize("value", [0, 3, 128, 16.0, True, "16"])
def test_mac_scale_lanes_rejected_with_the_value_and_the_valid_range(value):
    with pytest.raises(ValueError) as e:
        MacArrayParams(scale_lanes=value)          # 64 lanes (4 banks)
    assert "scale_lanes" in str(e.value) and repr(value) in str(e.value) and "1..lanes=64" in str(e.value)


def test_mac_scale_steps():
    p = mac_array_params_for(preset("nano"))
    assert (p.lanes, p.scale_lanes) == (128, 16)
    assert [p.scale_steps(n) for n in (2, 16, 32, 64, 512)] == [1, 1, 2, 4, 8]
    one = dataclasses.replace(p, scale_lanes=1)
    assert one.scale_steps(512) == 128 and one.scale_steps(2) == 2
    # a group holds the store port for its scale steps when they outnumber its reads (64 -> 64 folds
    # two row pairs a read: 16 q reads, z, s)
    assert one.issue_cycles(64, 64, 64) == 64 and p.issue_cycles(64, 64, 64) == 16 + 2
    assert dataclasses.replace(p, scale_lanes=64).scale_steps(64) == 1
