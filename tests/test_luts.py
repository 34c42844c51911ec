"""LUT generator: table shapes, monotonicity, accuracy bounds, ROM banks and hex files."""
import dataclasses
import json

import numpy as np
import pytest

from nano_k3 import luts
from nano_k3.fxp_math import exp2_neg, kda_decay, recip, rsqrt, sigmoid
from nano_k3.fxp_ops import ALPHA, T, X

# Documented max |interpolant - f| per table (real units); the generator measures it. The sigmoid and
# the decay have 1,024 segments (nano_k3.luts): 1.5e-6 and 1.0e-5, which keep the fixed-point model
# within 1.9e-8 of 1 - cos (target 2e-5, python -m nano_k3.precision --seeds 20).
ERROR_BOUNDS = {"rsqrt": 8e-7, "recip": 8e-7, "exp2": 8e-7, "sigmoid": 1.6e-6, "kda_decay": 1.1e-5}
ROM_BITS_MAX = 150 * 1024   # all tables together (area: 1 mm^2 per Mibit)


def test_every_table_is_documented_and_rom_shaped():
    t = luts.tables()
    assert set(t) == set(ERROR_BOUNDS)
    for lut in t.values():
        assert lut.depth <= 4096
        assert lut.doc and lut.max_err <= ERROR_BOUNDS[lut.name], (lut.name, lut.max_err)
    assert sum(lut.bits for lut in t.values()) <= ROM_BITS_MAX


def test_index_and_interpolation_bits_cover_the_input():
    t = luts.tables()
    assert t["rsqrt"].index_bits - 1 + t["rsqrt"].interp_bits == luts.MANT_BITS    # parity bit + mantissa
    assert t["recip"].index_bits + t["recip"].interp_bits == luts.MANT_BITS
    assert t["exp2"].index_bits + t["exp2"].interp_bits == T.frac
    assert t["sigmoid"].index_bits + t["sigmoid"].interp_bits == X.frac + 4           # |x| < 16
    assert t["kda_decay"].index_bits + t["kda_decay"].interp_bits == X.frac + 5       # g in [-16, 16)
    assert t["kda_decay"].out_frac == ALPHA.frac and t["kda_decay"].base_bits == ALPHA.bits


@pytest.mark.parametrize("name,increasing", [("recip", False), ("exp2", False), ("sigmoid", True),
                                             ("kda_decay", False)])
def test_monotonic(name, increasing):
    lut = luts.tables()[name]
    idx = np.repeat(np.arange(lut.depth), 8)
    r = np.tile(np.arange(8) << (lut.interp_bits - 3), lut.depth)
    y = lut.lookup(idx, r)
    d = np.diff(y)
    assert (d >= 0).all() if increasing else (d <= 0).all()


def test_rsqrt_monotonic_within_each_octave():
    lut = luts.tables()["rsqrt"]
    half = lut.depth // 2
    assert (np.diff(lut.base[:half]) <= 0).all() and (np.diff(lut.base[half:]) <= 0).all()
    assert abs(lut.base[0] - (1 << 23)) <= ERROR_BOUNDS["rsqrt"] * (1 << 23)   # 1/sqrt(1), equi-ripple knot


def test_exact_ones():
    assert luts.tables()["recip"].base[0] == 1 << 23   # 1/1 and 2^0 are exactly 1.0 (knot 0 kept)
    assert luts.tables()["exp2"].base[0] == 1 << 23


def test_function_accuracy_over_wide_ranges():
    m = np.array([1, 2, 3, 7, 1000, 12345, 2**40 + 17, 2**50 - 1], dtype=np.int64)
    for frac in (0, 16, 32):
        mant, e = rsqrt(m, frac)
        got = mant / 2.0**23 * 2.0**e
        want = 1 / np.sqrt(m / 2.0**frac)
        assert np.allclose(got, want, rtol=1e-6, atol=0)
        mant, e = recip(m, frac)
        assert np.allclose(mant / 2.0**23 * 2.0**e, 2.0**frac / m, rtol=1e-6, atol=0)
    one_t, one_x = 1 << T.frac, 1 << X.frac
    t = np.arange(0, 20 * one_t, 997 << 8, dtype=np.int64) + 5
    assert np.abs(exp2_neg(t) / 2**23 - 2.0 ** (-t / one_t)).max() < 1e-6
    x = np.arange(-20 * one_x, 20 * one_x, 1231 << 8, dtype=np.int64) + 7
    assert np.abs(sigmoid(x) / 2**23 - 1 / (1 + np.exp(-x / one_x))).max() < 1.7e-6
    g = np.arange(-16 * one_x, 16 * one_x, 1231 << 8, dtype=np.int64) + 3
    assert np.abs(kda_decay(g) / 2**ALPHA.frac - np.exp(-5 / (1 + np.exp(-g / one_x)))).max() < 1.1e-5


@pytest.mark.parametrize("name", sorted(ERROR_BOUNDS))
def test_bank_widths_are_the_narrowest_byte_multiples(name):
    lut = luts.tables()[name]
    even, odd = lut.banks
    assert (even.depth, odd.depth) == (lut.depth // 2 + 1, lut.depth // 2)
    assert even.width % 8 == 0 and odd.width % 8 == 0
    top = int(lut.knots.max())
    assert top < 1 << even.width and top >= 1 << (even.width - 8)           # 8 bits fewer would not hold it
    lo, hi = int(lut.delta.min()), int(lut.delta.max())
    fits = lambda w: -(1 << (w - 1)) <= lo and hi < 1 << (w - 1)            # noqa: E731
    assert fits(odd.width) and not fits(odd.width - 8)


def ref_decode(even: list[int], odd: list[int], low_bits: int) -> tuple[np.ndarray, np.ndarray]:
    """(base, delta) of every segment from the two banks, read as the hardware does (luts docstring)."""
    mask, sign = (1 << low_bits) - 1, 1 << (low_bits - 1)
    base, delta = [], []
    for i in range(len(even) + len(odd) - 1):
        e, o = even[(i + 1) // 2], odd[i // 2]
        d = ((e - o) if i % 2 else (o - e)) & mask
        d -= (d & sign) << 1
        base.append(e - d if i % 2 else e)
        delta.append(d)
    return np.array(base), np.array(delta)


def test_hex_files_written_and_decode_to_the_tables(tmp_path):
    paths = luts.write_roms(tmp_path)
    index = json.loads((tmp_path / "luts.json").read_text())
    assert sorted(p.name for p in paths) == sorted(b["file"] for t in index.values() for b in t["banks"].values())
    for name, lut in luts.tables().items():
        words = {}
        for bank in lut.banks:
            entry = index[name]["banks"][bank.kind]
            assert (entry["file"], entry["depth"], entry["width"]) == (bank.file, bank.depth, bank.width)
            lines = (tmp_path / bank.file).read_text().split()
            assert len(lines) == bank.depth and all(len(s) == bank.width // 4 for s in lines)
            words[bank.kind] = [int(s, 16) for s in lines]
        base, delta = ref_decode(words["even"], words["odd"], lut.low_bits)
        bad = np.flatnonzero((base != lut.base) | (delta != lut.delta))
        assert not bad.size, (name, int(bad[0]), (base[bad[0]], delta[bad[0]]), (lut.base[bad[0]], lut.delta[bad[0]]))


def test_discontinuous_table_rejected():
    lut = luts.tables()["exp2"]
    base = lut.base.copy()
    base[7] += 1                      # no longer base[6] + delta[6]: knots cannot represent it
    with pytest.raises(ValueError, match="not continuous at segment 6"):
        dataclasses.replace(lut, base=base)


def test_cli_writes_roms(tmp_path):
    assert luts.main(["-o", str(tmp_path / "roms")]) == 0
    assert sorted(p.name for p in (tmp_path / "roms").glob("*.hex")) == sorted(
        f"{n}_{kind}.hex" for n in ERROR_BOUNDS for kind in ("even", "odd"))


def test_tables_deterministic_and_cached():
    assert luts.tables() is luts.tables()
    a = {n: [b.hex_lines() for b in t.banks] for n, t in luts.tables().items()}
    luts.tables.cache_clear()
    assert {n: [b.hex_lines() for b in t.banks] for n, t in luts.tables().items()} == a
