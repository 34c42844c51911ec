"""LUT generator: table shapes, monotonicity, accuracy bounds, ROM hex files."""
import json
import math

import numpy as np
import pytest

from nano_k3 import luts
from nano_k3.fxp_math import exp2_neg, kda_decay, recip, rsqrt, sigmoid
from nano_k3.fxp_ops import ALPHA, T, X

# Documented max |interpolant - f| per table (real units); the generator measures it.
ERROR_BOUNDS = {"rsqrt": 8e-7, "recip": 8e-7, "exp2": 8e-7, "sigmoid": 5e-7, "kda_decay": 8e-7}
ROM_BITS_MAX = 300 * 1024   # all tables together (area: 1 mm^2 per Mibit)


def test_every_table_is_documented_and_rom_shaped():
    t = luts.tables()
    assert set(t) == set(ERROR_BOUNDS)
    for lut in t.values():
        assert lut.depth <= 4096 and lut.width % 8 == 0
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
    assert np.abs(sigmoid(x) / 2**23 - 1 / (1 + np.exp(-x / one_x))).max() < 6e-7
    g = np.arange(-16 * one_x, 16 * one_x, 1231 << 8, dtype=np.int64) + 3
    assert np.abs(kda_decay(g) / 2**ALPHA.frac - np.exp(-5 / (1 + np.exp(-g / one_x)))).max() < 1e-6


def test_hex_files_written_and_parseable(tmp_path):
    paths = luts.write_roms(tmp_path)
    index = json.loads((tmp_path / "luts.json").read_text())
    for p in paths:
        lut = luts.tables()[p.stem]
        lines = p.read_text().split()
        assert len(lines) == lut.depth == index[p.stem]["depth"]
        assert all(len(s) == lut.width // 4 for s in lines)
        words = [int(s, 16) for s in lines]
        base = np.array([w & ((1 << lut.base_bits) - 1) for w in words])
        delta = np.array([w >> lut.base_bits for w in words])
        delta = np.where(delta >= 1 << (lut.delta_bits - 1), delta - (1 << lut.delta_bits), delta)
        assert (base == lut.base).all() and (delta == lut.delta).all()


def test_cli_writes_roms(tmp_path):
    assert luts.main(["-o", str(tmp_path / "roms")]) == 0
    assert sorted(p.name for p in (tmp_path / "roms").glob("*.hex")) == sorted(f"{n}.hex" for n in ERROR_BOUNDS)


def test_tables_deterministic_and_cached():
    assert luts.tables() is luts.tables()
    a = {n: t.hex_lines() for n, t in luts.tables().items()}
    luts.tables.cache_clear()
    assert {n: t.hex_lines() for n, t in luts.tables().items()} == a
