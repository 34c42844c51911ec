"""``msh_chip_top``: the chip with exactly the SPEC_NANO_KPU.md §1 port list.

Amaranth names Verilog ports after signature members, so the members here are the SPEC names
(``clk``, ``rst_n``, ``cmd_data`` ...). The ``sync`` domain is defined here and driven from ``clk``
with the synchronous, active-high reset ``~rst_n`` (SPEC §1: active low; the testbench holds it low
for 16 cycles), so no implicit ``clk``/``rst`` ports appear. Everything else is ``hw.sequencer.ChipCore``.

``write_roms(out_dir, build)`` writes every ``$readmemh`` file the build needs into ``<out>/roms/``:
the LUT tables (``nano_k3.luts.write_roms``) and the micro-program (``hw.program``). The RTL names
them ``rtl/roms/<x>.hex`` (``hw.roms.ROM_DIR``): the tools run in the parent of ``<out>`` seen as ``rtl/``.
"""
from __future__ import annotations

from pathlib import Path

from amaranth.hdl import ClockDomain, ClockSignal, Module, ResetSignal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from hw.chip_load import STATUS_BAD_ROM
from hw.mem_engine import SPEC_ADDR_WIDTH, SPEC_BEAT_BITS
from hw.params import ChipParams, require_instance
from hw.program import ROM_NAME
from hw.rom_check import RomCheck
from hw.roms import ROM_SUBDIR, init_file
from hw.sequencer import ChipBuild, ChipCore, chip_build

TOP_NAME = "msh_chip_top"

SPEC_PORTS = {
    "clk": In(1), "rst_n": In(1),
    "cmd_data": In(32), "cmd_valid": In(1), "cmd_ready": Out(1),
    "rsp_data": Out(32), "rsp_valid": Out(1), "rsp_ready": In(1),
    "mem_req_valid": Out(1), "mem_req_ready": In(1), "mem_req_write": Out(1),
    "mem_req_addr": Out(SPEC_ADDR_WIDTH), "mem_req_wdata": Out(SPEC_BEAT_BITS),
    "mem_req_wstrb": Out(SPEC_BEAT_BITS // 8),
    "mem_rsp_valid": In(1), "mem_rsp_ready": Out(1), "mem_rsp_rdata": In(SPEC_BEAT_BITS),
}


class ChipTop(wiring.Component):
    """The SPEC §1 top level around ``ChipCore``."""

    def __init__(self, build: ChipBuild):
        require_instance(self, build, ChipBuild)
        self.build = build
        super().__init__(dict(SPEC_PORTS))

    def elaborate(self, platform):
        m = Module()
        m.domains.sync = ClockDomain("sync")
        m.d.comb += [ClockSignal("sync").eq(self.clk), ResetSignal("sync").eq(~self.rst_n)]
        core = m.submodules.core = ChipCore(self.build)
        m.d.comb += [
            core.cmd.payload.eq(self.cmd_data), core.cmd.valid.eq(self.cmd_valid), self.cmd_ready.eq(core.cmd.ready),
            self.rsp_data.eq(core.rsp.payload), self.rsp_valid.eq(core.rsp.valid), core.rsp.ready.eq(self.rsp_ready),
        ]
        for name in ("req_valid", "req_write", "req_addr", "req_wdata", "req_wstrb", "rsp_ready"):
            m.d.comb += getattr(self, f"mem_{name}").eq(getattr(core.mem, name))
        for name in ("req_ready", "rsp_valid", "rsp_rdata"):
            m.d.comb += getattr(core.mem, name).eq(getattr(self, f"mem_{name}"))
        return m


def write_roms(out_dir: Path | str, build: ChipBuild) -> list[Path]:
    """LUT tables and the micro-program as ``<out_dir>/roms/*.hex`` (SPEC §5: under rtl/roms/)."""
    from nano_k3.luts import write_roms as write_lut_roms
    roms = Path(out_dir) / ROM_SUBDIR
    paths = list(write_lut_roms(roms))
    paths.append(build.program.write_hex(roms / f"{ROM_NAME}.hex"))
    return paths


# --- rtl_gen hooks (rtl_gen.emit.BLOCKS["chip"]) ---------------------------------------------------
def chip_block(chip: ChipParams) -> ChipTop:
    return ChipTop(chip_build(chip))


def chip_files(chip: ChipParams, out_dir: Path) -> list[Path]:
    return write_roms(out_dir, chip_build(chip))


def chip_derived(chip: ChipParams) -> dict:
    b = chip_build(chip)
    images = b.rom_images
    bits = max(i.width for i in images)
    return {"model": b.cfg.name, "ops": len(b.program.ops), "vrf_slots": b.program.n_slots,
            "slot_words": b.slot_words, "program_word_bits": b.program.word_bits,
            "program": b.program.listing().splitlines(), "rom_dir": b.rom_dir,
            # every msh_rom in the ROM check's order: a mismatch of ROM k ends the run with STATUS_BAD_ROM | k
            "roms": [{"name": i.name, "init_file": init_file(i.file, b.rom_dir), "depth": i.depth, "width": i.width,
                      "checksum": f"{i.checksum(bits):#x}"} for i in images],
            "rom_check": {"checksum_bits": bits, "cycles": RomCheck.cycles(images),
                          "status_bad_rom": f"{STATUS_BAD_ROM:#010x}"}}
