"""hw.roms checksums and hw.rom_check.RomCheck (Amaranth simulator) against a plain reference.

The checker reads every word of every ROM once, in order, and must accept the generator's tables, and
reject a zeroed ROM (a file that was not found) and any single changed word, naming the first failing
ROM. The ROMs here are behavioural tables beside the checker (asynchronous read, as msh_rom).
"""
from __future__ import annotations

import random

import pytest
from amaranth.hdl import Array, Const, Module
from amaranth.sim import Simulator

from hw.rom_check import RomCheck
from hw.roms import ROM_DIR, RomImage, init_file, rom_checksum

SEED = 20260715


def ref_checksum(words, bits: int) -> int:
    """The closed form: word i rotated left by (n − 1 − i), all XORed (what the loop of rom_checksum sums)."""
    n, mask, acc = len(words), (1 << bits) - 1, 0
    for i, w in enumerate(words):
        r = (n - 1 - i) % bits
        acc ^= ((w << r) | (w >> (bits - r))) & mask if r else w
    return acc


def random_images(rng: random.Random) -> list[RomImage]:
    shapes = [(9, 24), (8, 16), (5, 8), (16, 40)]
    return [RomImage(f"t{k}", f"t{k}.hex", d, w, tuple(rng.getrandbits(w) for _ in range(d)))
            for k, (d, w) in enumerate(shapes)]


def test_checksum_matches_reference_and_catches_one_changed_word():
    rng = random.Random(SEED)
    print(f"seed {SEED}")
    for _ in range(200):
        bits, n = rng.choice([8, 16, 24, 96]), rng.randint(1, 70)
        words = [rng.getrandbits(bits) for _ in range(n)]
        assert rom_checksum(words, bits) == ref_checksum(words, bits)
        i, bad = rng.randrange(n), list(words)
        bad[i] ^= 1 << rng.randrange(bits) if rng.random() < 0.5 else rng.getrandbits(bits) or 1
        assert rom_checksum(bad, bits) != rom_checksum(words, bits), (bits, n, i)
    assert rom_checksum([0] * 513, 24) == 0


def test_a_table_an_all_zero_rom_would_match_is_refused():
    with pytest.raises(ValueError, match=r"ROM table bad_table \(bad\.hex\).*all-zero ROM"):
        RomImage("bad_table", "bad.hex", 2, 8, (1, 2)).checksum(8)        # rotl(1) ^ 2 == 0
    with pytest.raises(ValueError, match="bad_table"):
        RomCheck([RomImage("bad_table", "bad.hex", 4, 8, (0, 0, 0, 0))])
    with pytest.raises(ValueError, match="WIDTH 12"):
        RomImage("odd", "odd.hex", 2, 12, (1, 2))


def test_init_file_is_under_rtl_roms():
    assert ROM_DIR == "rtl/roms" and init_file("sigmoid_even.hex") == "rtl/roms/sigmoid_even.hex"


def _run(images: list[RomImage], contents: list[tuple[int, ...]], limit: int = 2000) -> dict:
    """Simulate RomCheck over ROMs holding ``contents`` (the checksums come from ``images``)."""
    dut = RomCheck(images)
    m = Module()
    m.submodules.dut = dut
    for k, words in enumerate(contents):
        rom = Array(Const(w, dut.bits) for w in words)
        m.d.comb += dut.data[images[k].name].eq(rom[dut.addr[:max(1, (len(words) - 1).bit_length())]])
    out = {}

    async def bench(ctx):
        await ctx.tick().repeat(3)
        ctx.set(dut.start, 1)
        await ctx.tick()
        ctx.set(dut.start, 0)
        for cycle in range(1, limit):
            if ctx.get(dut.done):
                out.update(cycles=cycle, ok=ctx.get(dut.ok), failed=ctx.get(dut.failed), busy=ctx.get(dut.busy))
                return
            await ctx.tick()

    sim = Simulator(m)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    return out


def test_rom_check_accepts_the_tables_in_the_documented_cycles():
    images = random_images(random.Random(SEED))
    got = _run(images, [i.words for i in images])
    assert got == {"cycles": RomCheck.cycles(images), "ok": 1, "failed": 0, "busy": 0}, got


@pytest.mark.parametrize("fault", ["zeroed", "flipped-bit", "changed-word"])
def test_rom_check_names_the_first_failing_rom(fault):
    rng = random.Random(f"{SEED}-{fault}")
    images = random_images(rng)
    for k in range(len(images)):
        contents = [list(i.words) for i in images]
        if fault == "zeroed":
            contents[k] = [0] * images[k].depth
        else:
            a = rng.randrange(images[k].depth)
            flip = 1 << rng.randrange(images[k].width) if fault == "flipped-bit" else rng.getrandbits(images[k].width) or 1
            contents[k][a] ^= flip
        got = _run(images, [tuple(c) for c in contents])
        print(f"{fault} ROM {k}: {got}")
        assert got.get("ok") == 0 and got["failed"] == k and got["busy"] == 0, (fault, k, got)
        assert got["cycles"] == sum(i.depth for i in images[:k + 1]) + 2
