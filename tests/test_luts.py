"""LUT generator: table shapes, monotonicity, accuracy bounds, ROM hex files."""
import json
import math

import numpy as np
import pytest

from nano_k3 import luts
from nano_k3.fxp_math import exp2_neg, kda_decay, recip, rsqrt, sigmoid

# Documented max |interpolant - f| per table (real units); the generator measures it.
ERROR_BOUNDS = {"rsqrt": 1e-5, "recip": 5e-6, "exp2": 2e-6, "sigmoid": 2e-5, "kda_decay": 3e-5}


def test_every_table_is_documented_and_rom_shaped():
    t = luts.tables()
    assert set(t) == set(ERROR_BOUNDS)
    for lut in t.values():
        assert lut.depth <= 4096 and lut.width % 8 == 0
        assert lut.doc and lut.max_err <= ERROR_BOUNDS[lut.name], (lut.name, lut.max_err)


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
    assert (np.diff(lut.base[:128]) <= 0).all() and (np.diff(lut.base[128:]) <= 0).all()
    assert lut.base[0] == 1 << 23                      # 1/sqrt(1) = 1.0 exactly


def test_function_accuracy_over_wide_ranges():
    m = np.array([1, 2, 3, 7, 1000, 12345, 2**40 + 17, 2**50 - 1], dtype=np.int64)
    for frac in (0, 16, 32):
        mant, e = rsqrt(m, frac)
        got = mant / 2.0**23 * 2.0**e
        want = 1 / np.sqrt(m / 2.0**frac)
        assert np.allclose(got, want, rtol=2e-5, atol=0)
        mant, e = recip(m, frac)
        assert np.allclose(mant / 2.0**23 * 2.0**e, 2.0**frac / m, rtol=1e-5, atol=0)
    t = np.arange(0, 20 << 16, 997, dtype=np.int64)
    assert np.abs(exp2_neg(t) / 2**23 - 2.0 ** (-t / 65536)).max() < 3e-6
    x = np.arange(-(20 << 16), 20 << 16, 1231, dtype=np.int64)
    assert np.abs(sigmoid(x) / 2**23 - 1 / (1 + np.exp(-x / 65536))).max() < 2e-5
    g = np.arange(-(16 << 16), 16 << 16, 1231, dtype=np.int64)
    assert np.abs(kda_decay(g) / 2**24 - np.exp(-5 / (1 + np.exp(-g / 65536)))).max() < 3e-5


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
