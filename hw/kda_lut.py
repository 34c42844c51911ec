"""LUT evaluation helpers of the KDA engine: msh_rom-backed interpolation and a pipelined rsqrt.

The tables are ``nano_k3.luts.tables()`` (ROM words ``{delta, base}``, files ``roms/<name>.hex``
written by ``nano_k3.luts.write_roms``); the evaluation rule is ``Lut.lookup``:
``y = base[i] + round_half_up(delta[i] * r / 2**interp_bits)``. The ROM read is combinational
(msh_rom), so the interpolation multiply (delta_bits x interp_bits) and the add share one stage
behind the registered index.

Interim: hw/lut_unit.py (shared LUT unit) was not available when this engine was written; these
helpers are the minimum the engine needs and should be replaced by it once it lands.
"""
from __future__ import annotations

from amaranth.hdl import Elaboratable, Instance, Module, Signal, signed, unsigned

from nano_k3 import fxp_math
from nano_k3 import luts as L

ROM_DIR = "roms"      # $readmemh path, relative to the simulator's / synthesis working directory


def rom_path(name: str) -> str:
    return f"{ROM_DIR}/{name}.hex"


def lut_rom(m: Module, name: str, idx: Signal, r: Signal, y: Signal, *, tag: str) -> None:
    """y <= lookup(idx, r) one cycle after idx/r settle (idx, r are expected to be registers)."""
    t = L.tables()[name]
    word = Signal(t.width, name=f"{tag}_word")
    spare_a, spare_d = Signal(t.index_bits, name=f"{tag}_a2"), Signal(t.width, name=f"{tag}_d2")
    m.submodules[f"{tag}_rom"] = Instance(
        "msh_rom", p_DEPTH=t.depth, p_WIDTH=t.width, p_ADDRW=t.index_bits, p_INIT_FILE=rom_path(name),
        i_raddr1=idx, o_rdata1=word, i_raddr2=spare_a, o_rdata2=spare_d)
    base = word[:t.base_bits]
    delta = word[t.base_bits:].as_signed()
    prod = Signal(signed(t.delta_bits + t.interp_bits + 1), name=f"{tag}_dr")
    m.d.comb += prod.eq(delta * r)
    m.d.sync += y.eq(base + ((prod + (1 << (t.interp_bits - 1))) >> t.interp_bits))


def lead_one(m: Module, v: Signal, name: str) -> Signal:
    """Position of the leading one of v > 0 (a priority encoder; bit_length - 1)."""
    lead = Signal(range(max(2, len(v))), name=name)
    for b in range(len(v)):
        with m.If(v[b]):
            m.d.comb += lead.eq(b)
    return lead


class Rsqrt(Elaboratable):
    """``fxp_math.rsqrt`` pipelined: (ss, frac_sel) -> (mant UQ1.23, e) ``LATENCY`` cycles later.

    ``fracs`` is the tuple of fractional-bit counts the caller may select with ``frac_sel``
    (compile-time constants: the L2 and RMS norms use different ones).
    Stages: register input | leading-one | normalise (truncating barrel shift) | ROM + interpolation.
    """

    LATENCY = 4

    def __init__(self, in_bits: int, fracs: tuple[int, ...]):
        t = L.tables()["rsqrt"]
        if t.index_bits - 1 + L.RSQRT_INTERP != fxp_math.MANT_FRAC:
            raise ValueError(f"rsqrt table geometry {t.index_bits}/{L.RSQRT_INTERP} does not cover "
                             f"{fxp_math.MANT_FRAC} mantissa bits")
        self.in_bits, self.fracs = in_bits, tuple(fracs)
        self.i_valid = Signal()
        self.i_ss = Signal(unsigned(in_bits))
        self.i_sel = Signal(range(max(2, len(self.fracs))))
        self.o_valid = Signal()
        self.o_mant = Signal(t.base_bits + 1)
        self.o_e = Signal(signed(8))

    def elaborate(self, platform):
        m = Module()
        mf = fxp_math.MANT_FRAC
        v1, ss1, sel1 = Signal(), Signal(self.in_bits), Signal.like(self.i_sel)
        m.d.sync += [v1.eq(self.i_valid), ss1.eq(self.i_ss), sel1.eq(self.i_sel)]
        # leading one
        v2, ss2, lead2, frac2 = Signal(), Signal(self.in_bits), Signal(range(max(2, self.in_bits))), Signal(8)
        lead = lead_one(m, ss1, "rsq_lead")
        frac = Signal(8)
        for k, f in enumerate(self.fracs):
            with m.If(sel1 == k):
                m.d.comb += frac.eq(f)
        m.d.sync += [v2.eq(v1), ss2.eq(ss1), lead2.eq(lead), frac2.eq(frac)]
        # normalise: leading one to bit mf, bits below truncated; E = lead - frac, p = E & 1
        v3, man3, p3, e3 = Signal(), Signal(mf), Signal(), Signal(signed(8))
        wide = Signal(self.in_bits + mf)
        m.d.comb += wide.eq((ss2 << mf) >> lead2)             # = ss2 * 2^(mf - lead), truncated
        E = Signal(signed(9))
        m.d.comb += E.eq(lead2 - frac2)
        m.d.sync += [v3.eq(v2), man3.eq(wide[:mf]), p3.eq(E[0]), e3.eq(-((E - E[0]) >> 1))]
        # table: index {p, top mantissa bits}, interpolation on the rest
        t = L.tables()["rsqrt"]
        idx, r = Signal(t.index_bits), Signal(L.RSQRT_INTERP)
        m.d.comb += [idx.eq((p3 << (t.index_bits - 1)) | (man3 >> L.RSQRT_INTERP)), r.eq(man3[:L.RSQRT_INTERP])]
        lut_rom(m, "rsqrt", idx, r, self.o_mant, tag="rsq")
        m.d.sync += [self.o_valid.eq(v3), self.o_e.eq(e3)]
        return m
