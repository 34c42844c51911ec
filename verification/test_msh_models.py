"""cocotb + Verilator tests of the storage macro simulation models (verification/models, SPEC §5).

msh_sram: per-byte write enables, synchronous read valid the next cycle, read-during-write to the same
address returns the old word, rdata holds while re is low. msh_rom: two combinational read ports
loaded by $readmemh. Both are checked against a Python dictionary model.
"""
from __future__ import annotations

import os
import random
from pathlib import Path

import cocotb
from cocotb.clock import Clock
from cocotb.triggers import ReadOnly, RisingEdge, Timer

SEED = 20240917
ROM_HEX_ENV = "NANO_K3_ROM_HEX"
MODELS = Path(__file__).resolve().parent / "models"


@cocotb.test()
async def sram_random_access(dut):
    rng = random.Random(SEED)
    depth, width = int(dut.DEPTH.value), int(dut.WIDTH.value)
    nbytes = width // 8
    assert len(dut.wdata) == width and len(dut.wstrb) == nbytes and len(dut.raddr) == (depth - 1).bit_length()
    Clock(dut.clk, 10, unit="ns").start()
    dut.we.value, dut.re.value = 0, 0
    model: dict[int, int] = {}
    # fill every word first: the contents start undefined
    for a in range(depth):
        dut.we.value, dut.waddr.value, dut.wstrb.value = 1, a, (1 << nbytes) - 1
        dut.wdata.value = model.setdefault(a, rng.getrandbits(width))
        await RisingEdge(dut.clk)
    expect_next: int | None = None      # rdata expected in the cycle after a read
    held = None
    for cycle in range(3000):
        we, re = rng.random() < 0.6, rng.random() < 0.6
        waddr = rng.randrange(depth)
        raddr = waddr if rng.random() < 0.3 else rng.randrange(depth)   # many read-during-write collisions
        wdata, wstrb = rng.getrandbits(width), rng.getrandbits(nbytes)
        dut.we.value, dut.re.value, dut.waddr.value, dut.raddr.value = int(we), int(re), waddr, raddr
        dut.wdata.value, dut.wstrb.value = wdata, wstrb
        await ReadOnly()
        if expect_next is not None:
            got = dut.rdata.value.to_unsigned()
            assert got == expect_next, f"cycle {cycle}: rdata expected {expect_next:#x} got {got:#x}"
        await RisingEdge(dut.clk)
        if re:
            expect_next = held = model[raddr]        # old contents, even when waddr == raddr
        else:
            expect_next = held                        # rdata holds
        if we:
            for b in range(nbytes):
                if wstrb >> b & 1:
                    mask = 0xFF << (8 * b)
                    model[waddr] = (model[waddr] & ~mask) | (wdata & mask)


@cocotb.test()
async def rom_two_ports(dut):
    words = [int(w, 16) for w in Path(os.environ[ROM_HEX_ENV]).read_text().split()]
    depth = int(dut.DEPTH.value)
    assert len(words) == depth
    rng = random.Random(SEED)
    for _ in range(4 * depth):
        a1, a2 = rng.randrange(depth), rng.randrange(depth)
        dut.raddr1.value, dut.raddr2.value = a1, a2
        await Timer(1, unit="ns")         # combinational: no clock involved
        assert dut.rdata1.value.to_unsigned() == words[a1], (a1, hex(words[a1]), dut.rdata1.value)
        assert dut.rdata2.value.to_unsigned() == words[a2], (a2, hex(words[a2]), dut.rdata2.value)


def test_msh_sram_model():
    from verification.runner import run_cocotb
    for depth, width in ((16, 32), (40, 24)):
        res = run_cocotb(f"msh_sram_d{depth}_w{width}", [MODELS / "msh_sram.v"], "msh_sram",
                         "verification.test_msh_models", testcase="sram_random_access",
                         parameters={"DEPTH": depth, "WIDTH": width})
        assert res.passed and res.n_tests == 1, res


def test_msh_rom_model():
    from verification.runner import SIM_ROOT, run_cocotb
    depth, width = 48, 16
    rng = random.Random(SEED)
    hex_file = SIM_ROOT / "msh_rom_hex" / "table.hex"
    hex_file.parent.mkdir(parents=True, exist_ok=True)
    hex_file.write_text("".join(f"{rng.getrandbits(width):04x}\n" for _ in range(depth)))
    res = run_cocotb("msh_rom", [MODELS / "msh_rom.v"], "msh_rom", "verification.test_msh_models",
                     testcase="rom_two_ports", extra_env={ROM_HEX_ENV: str(hex_file)},
                     parameters={"DEPTH": depth, "WIDTH": width, "INIT_FILE": f'"{hex_file}"'})
    assert res.passed and res.n_tests == 1, res


def test_models_lint_clean():
    from verification.runner import lint
    for name, args in (("msh_sram", ["-GDEPTH=40", "-GWIDTH=24"]), ("msh_rom", ['-GINIT_FILE="t.hex"'])):
        res = lint([MODELS / f"{name}.v"], name, extra_args=args)
        assert res.clean, res.output
