"""``RomCheck``: the chip checks its ROMs before it trusts them (one checker shared by every ROM).

A ROM file that was not found reads as zeros (Verilator only warns), and a chip computing with zeroed
tables still writes logits and the good status. So every msh_rom of the chip (the LUT banks and the
micro-program) lends one read port to this checker during the load phase, while the ROMs are otherwise
idle: after ``start`` it reads ROM 0's words 0 .. DEPTH − 1, then ROM 1's, and so on, one word a cycle,
through the one address output ``addr`` (every ROM's lent port takes it while ``busy``; ROM k's word comes
back on ``data.<its name>``, as wide as the ROM), and folds each word into ``acc = rotate_left(acc, 1) ^ word`` in ``bits`` bits (the
widest ROM's). The cycle after a ROM's last word, ``acc`` is compared with that ROM's checksum, which the
generator computed from the table contents (``hw.roms.RomImage.checksum``, the same sum) and which sits in
the RTL as a constant. The first mismatch ends the check: ``done``, not ``ok``, ``failed`` = that ROM's
index. Otherwise ``done`` and ``ok`` come ``cycles(images)`` cycles after ``start``.

Cost: one accumulator of ``bits`` flops, a mux of the ROMs' read data (each input as wide as its ROM, so only
the widest ROM's upper bits reach the accumulator: a synthesis that keeps this module apart cannot see
zero-extended bits), an address counter, and the per-ROM constants (checksum, last address) as decoder-selected constant bits (a case over constants, no
array that synthesis could take for a memory).
"""
from __future__ import annotations

from amaranth.hdl import Array, Cat, Const, Module, Mux, Signal
from amaranth.lib import wiring
from amaranth.lib.data import StructLayout
from amaranth.lib.wiring import In, Out

from hw.roms import RomImage


def _const_of(onehot: list, values: list[int], width: int):
    """values[i] where onehot[i] is high (each bit the OR of the decoder lines whose value has it set)."""
    return Cat(*[Cat(*[onehot[i] for i, v in enumerate(values) if v >> b & 1] or [Const(0, 1)]).any()
                 for b in range(width)])


class RomCheck(wiring.Component):
    """Checks ``images`` (``hw.roms.RomImage``, one per msh_rom, in read order); see the module docstring.

    Members: ``start`` (In, one cycle), ``addr`` (Out: the word address every lent read port takes while
    ``busy``), ``data`` (In: each ROM's read data, field ``images[k].name``), ``busy``, ``done``, ``ok``,
    ``failed`` (Out: the first failing ROM's index; ``ok`` and ``failed`` hold once ``done`` is high)."""

    def __init__(self, images: list[RomImage]):
        images = list(images)
        if not images or not all(isinstance(i, RomImage) for i in images):
            self._MustUse__silence = True
            raise ValueError(f"images must be a non-empty list of hw.roms.RomImage, got {images!r}")
        if len({i.name for i in images}) != len(images):
            self._MustUse__silence = True
            raise ValueError(f"ROM names must be unique, got {[i.name for i in images]}")
        self.images = images
        self.bits = max(i.width for i in images)
        try:
            self.checksums = [i.checksum(self.bits) for i in images]     # ValueError: a table zeros would match
        except ValueError:
            self._MustUse__silence = True
            raise
        self.addr_bits = max(max(1, (i.depth - 1).bit_length()) for i in images)
        super().__init__({
            "start": In(1),
            "addr": Out(self.addr_bits),
            "data": In(StructLayout({i.name: i.width for i in images})),
            "busy": Out(1),
            "done": Out(1),
            "ok": Out(1),
            "failed": Out(range(len(images))),
        })

    @staticmethod
    def cycles(images: list[RomImage]) -> int:
        """From the ``start`` cycle to the first cycle ``done`` is high when every ROM matches: a cycle per
        word, the last ROM's comparison, the registered ``done``."""
        return sum(i.depth for i in images) + 2

    def elaborate(self, platform):
        m = Module()
        n = len(self.images)
        k = Signal(range(n))                 # the ROM being read
        acc = Signal(self.bits)
        cmp = Signal()                       # acc holds ROM cmp_k's whole sum: compare it this cycle
        cmp_k = Signal(range(n))
        read_dec = [k == i for i in range(n)]
        cmp_dec = [cmp_k == i for i in range(n)]
        last = _const_of(read_dec, [i.depth - 1 for i in self.images], self.addr_bits)
        expect = _const_of(cmp_dec, self.checksums, self.bits)
        at_last = Signal()
        m.d.comb += at_last.eq(self.addr == last)

        m.d.sync += cmp.eq(0)
        with m.If(self.busy):
            rotated = Cat(acc[-1], acc[:-1])
            words = Array(self.data[i.name] for i in self.images)     # each zero-extended by Array
            m.d.sync += acc.eq(Mux(self.addr == 0, 0, rotated) ^ words[k])
            with m.If(at_last):
                m.d.sync += [self.addr.eq(0), k.eq(k + 1), cmp.eq(1), cmp_k.eq(k)]
                with m.If(k == n - 1):
                    m.d.sync += self.busy.eq(0)
            with m.Else():
                m.d.sync += self.addr.eq(self.addr + 1)
        with m.Elif(self.start & ~self.done):
            m.d.sync += [self.busy.eq(1), self.addr.eq(0), k.eq(0)]
        with m.If(cmp):
            with m.If(acc != expect):
                m.d.sync += [self.busy.eq(0), self.done.eq(1), self.ok.eq(0), self.failed.eq(cmp_k)]
            with m.Elif(cmp_k == n - 1):
                m.d.sync += [self.done.eq(1), self.ok.eq(1)]
        return m
