"""The msh_rom banks of a LUT table and their read ports, for engines that share one table's macros.

ROM: each LutEval owns its table's two ``msh_rom`` banks (SPEC §5; ``nano_k3.luts`` documents the
even / odd knot layout), ``INIT_FILE = "<rom_dir>/<table>_even.hex"`` and ``"<rom_dir>/<table>_odd.hex"``.
``lanes=2`` uses both combinational read ports of each bank (two lookups per cycle); with ``lanes=1``
ports 2 are tied to address 0 and unused, unless the LutEval is given a ``RomPort`` instead:
``shared_rom`` puts the banks of a table into a parent module and hands out their two read ports, so
two single-lane LUT units in different engines share one pair of macros (the function classes and
the engines pass ``port`` / ``roms`` through; a LutEval of ``lanes`` lanes takes a tuple of ``lanes`` ports).
``$readmemh`` resolves a relative path against the working directory of the simulator or synthesis
tool: the default ``rom_dir`` is ``hw.roms.ROM_DIR`` (``rtl/roms``, SPEC §5), which resolves when the tool
runs in the parent of the emitted RTL folder seen as ``rtl/`` (the cocotb tests emit into
``build/sim/<name>/rtl`` and run there; ``nano_k3.luts.write_roms`` writes the files into its ``roms/``).
"""
from __future__ import annotations

from dataclasses import dataclass

from amaranth.hdl import Instance, Module, Signal

from hw.roms import RomImage, init_file
from nano_k3 import luts


@dataclass(frozen=True)
class RomPort:
    """One read port of each msh_rom bank (even, odd) of a table that ``shared_rom`` placed in another
    module: the LutEval given the port drives ``addr``; ``data`` is the combinational read data."""

    table: str
    addr: tuple[Signal, Signal]     # (even bank, odd bank)
    data: tuple[Signal, Signal]


def shared_rom(m: Module, table: str, rom_dir: str, name: str) -> tuple[RomPort, RomPort]:
    """Add the two msh_rom banks of LUT ``table`` to ``m`` as submodules ``<name>_even`` / ``<name>_odd``;
    returns their two read ports (port k reads both banks through their read port k + 1)."""
    banks = luts.tables()[table].banks
    ports = tuple(RomPort(table, tuple(Signal(b.addr_bits, name=f"{name}_{b.kind}_raddr{k}") for b in banks),
                          tuple(Signal(b.width, name=f"{name}_{b.kind}_rdata{k}") for b in banks)) for k in (1, 2))
    for j, b in enumerate(banks):
        m.submodules[f"{name}_{b.kind}"] = Instance(
            "msh_rom", p_DEPTH=b.depth, p_WIDTH=b.width, p_ADDRW=b.addr_bits,
            p_INIT_FILE=init_file(b.file, rom_dir),
            i_raddr1=ports[0].addr[j], o_rdata1=ports[0].data[j], i_raddr2=ports[1].addr[j], o_rdata2=ports[1].data[j])
    return ports


def rom_images(table: str, name: str) -> tuple[RomImage, RomImage]:
    """The banks ``shared_rom(m, table, rom_dir, name)`` instantiates, as ``hw.roms.RomImage`` (the ROM check)."""
    return tuple(RomImage(f"{name}_{b.kind}", b.file, b.depth, b.width, tuple(int(w) for w in b.words))
                 for b in luts.tables()[table].banks)


def port_of(roms, table: str, k: int = 0) -> RomPort | None:
    """The ``k``-th shared-ROM port for ``table`` in an engine's ``roms`` mapping (table -> tuple of
    ports, one per LUT unit of that table); None: the unit owns its ROM."""
    ports = () if roms is None else roms.get(table, ())
    return ports[k] if k < len(ports) else None
