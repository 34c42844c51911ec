"""ROM turn-taking: the chip's LUT ROMs, shared by the engines that use the same table, the
micro-program ROM, and the ROM check's read port on each of them.

Every LUT table the engines use sits in one pair of msh_rom banks (``hw.lib.lut_rom.shared_rom``) whose two
read ports serve the units ``SHARED_ROMS`` lists; units on one port take turns by the op that runs
(``TURNS``). Read port 2 of every ROM is the ROM checker's while it runs (the load phase, ``hw.rom_check``).
These functions add their logic to the chip core's module (no hierarchy of their own).
"""
from __future__ import annotations

from amaranth.hdl import Instance, Module, Mux, Signal

from hw.lib.lut_rom import RomPort, shared_rom
from hw.params import ChipParams, log2
from hw.program import ROM_NAME, Opc
from hw.rom_check import RomCheck
from hw.roms import init_file

# LUT ROMs shared between units: (table, the unit on read port 1, the unit on read port 2). Units on one
# port (a tuple) take turns by the op that runs (``TURNS``: the router during a ROUTE op, the element-wise
# unit during an EW op, ...; the last unit otherwise): their lookups only happen while their ops run (a KDA
# or MLA engine's last op lasts until its outputs are collected). A unit's ports are in the order listed
# (the element-wise unit's SiLU lane k takes its k-th sigmoid port, MLA head k its k-th exp2 port).
SHARED_ROMS = (("sigmoid", "kda", "ew"), ("sigmoid", ("router", "kda"), "ew"), ("rsqrt", ("norm", "kda"), "mixer"),
               ("recip", ("router", "mla"), "mixer"), ("exp2", "mla", ("mixer", "mla")), ("kda_decay", "kda", "kda"))
TURNS = {"router": Opc.ROUTE, "ew": Opc.EW, "norm": Opc.RMS, "mixer": Opc.MIX}
# ROUTE ends with the router's experts (hw/chip_collect.py); its reciprocal and weights follow: on the recip
# ROM its turn (``turn["router_w"]``) lasts until the last weight is collected (no MLA op runs before then).
LATE_TURN = ("router", "recip")


def shared_roms(chip: ChipParams) -> tuple:
    """``SHARED_ROMS``; with 4 element-wise lanes, lanes 2 and 3 take turns on the KDA's sigmoid ports."""
    if chip.ew_lanes <= 2:
        return SHARED_ROMS
    return (("sigmoid", ("ew", "kda"), "ew"), ("sigmoid", ("router", "ew", "kda"), "ew")) + SHARED_ROMS[2:]


def lut_rom_name(table: str, k: int) -> str:
    """Instance name of the k-th shared LUT ROM (its banks are ``<name>_even`` / ``<name>_odd``)."""
    return f"{table}{k}_rom"


def time_shared(m: Module, port: RomPort, turns: list[Signal]) -> tuple[RomPort, ...]:
    """len(turns) + 1 users of one ROM read port: user k addresses it while ``turns[k]`` is high (the
    first such k), the last user otherwise."""
    users = tuple(RomPort(port.table, tuple(Signal.like(a, name=f"{a.name}_u{k}") for a in port.addr), port.data)
                  for k in range(len(turns) + 1))
    for j, a in enumerate(port.addr):
        sel = users[-1].addr[j]
        for k in reversed(range(len(turns))):
            sel = Mux(turns[k], users[k].addr[j], sel)
        m.d.comb += a.eq(sel)
    return users


def share_lut_roms(m: Module, ctx) -> None:
    """The LUT ROMs of ``shared_roms``: ``ctx.roms`` (engine -> {table: its ports}), ``ctx.turn`` (a
    unit's op runs), ``ctx.checked`` (each ROM's check port) and ``ctx.check_turn`` (the check runs)."""
    b, chip = ctx.b, ctx.chip
    # LUT ROMs shared by engines that use the same table (a read port each, or one port in turns). Read
    # port 2 of every ROM is the ROM checker's while it runs (load phase, ``hw.rom_check``).
    roms: dict = {}                       # engine -> {table: (its ports, in SHARED_ROMS order)}
    turn = {u: Signal(name=f"{u}_turn") for u in (*TURNS, "router_w")}     # the unit's turn on a shared port
    checked: list = []                    # (address, read data) of the port each ROM lends the checker
    check_turn = Signal()
    for k, (table, *units) in enumerate(shared_roms(chip)):
        p1, p2 = shared_rom(m, table, b.rom_dir, lut_rom_name(table, k))
        chk, p2 = time_shared(m, p2, [check_turn])
        checked += zip(chk.addr, chk.data)
        for unit, port in zip(units, (p1, p2)):
            users = [(unit, port)]
            if isinstance(unit, tuple):          # the units take turns: the last one when no other's turn
                turns = [turn["router_w" if (x, table) == LATE_TURN else x] for x in unit[:-1]]
                users = zip(unit, time_shared(m, port, turns))
            for u, p in users:
                roms.setdefault(u, {}).setdefault(table, ())
                roms[u][table] += (p,)
    vars(ctx).update(roms=roms, turn=turn, checked=checked, check_turn=check_turn)


def program_rom(m: Module, ctx) -> None:
    """The micro-program msh_rom (read at pc in FETCH, else at pc + 1) and the ROM check over every ROM
    (``ctx.rom_check``), in the order of ``ctx.checked``."""
    b, prog, rom_w, pc, rom_addr, rom_data = ctx.b, ctx.prog, ctx.rom_w, ctx.pc, ctx.rom_addr, ctx.rom_data
    fetching, checked, check_turn = ctx.fetching, ctx.checked, ctx.check_turn
    m.d.comb += rom_addr.eq(Mux(fetching, pc, pc + 1))
    prog_chk = Signal(max(1, log2(prog.depth)), name="program_rom_chk_addr"), Signal(rom_w, name="program_rom_chk")
    m.submodules.program_rom = Instance(
        "msh_rom", p_DEPTH=prog.depth, p_WIDTH=rom_w, p_ADDRW=max(1, log2(prog.depth)),
        p_INIT_FILE=init_file(f"{ROM_NAME}.hex", b.rom_dir),
        i_raddr1=rom_addr, o_rdata1=rom_data, i_raddr2=prog_chk[0], o_rdata2=prog_chk[1])
    checked.append(prog_chk)
    rom_check = m.submodules.rom_check = RomCheck(b.rom_images)       # in the order of ``checked``
    for img, (addr, data) in zip(b.rom_images, checked, strict=True):
        m.d.comb += [addr.eq(rom_check.addr[:len(addr)]), rom_check.data[img.name].eq(data)]
    m.d.comb += check_turn.eq(rom_check.busy)
    vars(ctx).update(rom_check=rom_check)
