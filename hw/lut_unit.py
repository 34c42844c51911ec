"""The LUT unit: the rtl_gen block ``lut_unit`` that tests and characterises the LUT functions of
``hw.lib.lut`` (Sigmoid, Silu, Exp2Neg, KdaDecay, Rsqrt, Recip, ApplyMant) side by side behind one pair
of streams; the engines instantiate those functions directly."""
from __future__ import annotations

from dataclasses import dataclass, field

from amaranth.hdl import Module, Signal, signed, unsigned
from amaranth.lib import stream, wiring
from amaranth.lib.data import StructLayout
from amaranth.lib.wiring import In, Out

from hw.lib.lut import ApplyMant, Exp2Neg, KdaDecay, Recip, Rsqrt, Sigmoid, Silu
from hw.lib.pipe import delay, reject
from hw.roms import ROM_DIR
from nano_k3 import fxp_math, luts
from nano_k3.fxp_ops import ALPHA, P, T, X


# --- the block the tests (and rtl_gen) build: every function side by side ------------------------
def _apply_e_range_default() -> tuple[int, int]:
    # left shifts of v·mant stay below 2^62 so that the int64 reference (fxp_math.apply_mant) is exact
    return (-24, fxp_math.MANT_FRAC + 62 - (X.bits + P.bits))


@dataclass(frozen=True)
class LutUnitParams:
    """Operand widths of the LUT-unit test block (engines pick their own widths per instance)."""

    m_bits: int = 56                 # rsqrt/recip input: a norm's sum of squares (≤ 54 bits at n ≤ 128)
    frac_bits: int = 7               # run-time ``frac`` of rsqrt/recip
    t_bits: int = T.bits             # exp2_neg input (softmax exponent differences, T)
    apply_v_frac: int = X.frac       # ApplyMant test instance: v in X, out in X (saturated)
    apply_out_frac: int = X.frac
    apply_e_range: tuple[int, int] = field(default_factory=_apply_e_range_default)

    def __post_init__(self) -> None:
        for name in ("m_bits", "frac_bits", "t_bits", "apply_v_frac", "apply_out_frac"):
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                raise ValueError(f"{name} must be a positive integer, got {v!r}")
        if self.m_bits > 64:
            raise ValueError(f"m_bits must be at most 64, got {self.m_bits}")


class LutUnit(wiring.Component):
    """Every LUT-unit function on its own operand, in lock-step, behind one pair of streams.

    ``i`` payload: x (sigmoid and SiLU), t (exp2_neg), g (kda_decay), m + frac (rsqrt and recip),
    v + mant + e (apply_mant). ``o`` payload: one field per result; the shorter pipelines are padded
    with delay registers to ``LATENCY`` (the longest, SiLU) so that one beat in gives one beat out.
    This is a test and characterisation block; engines instantiate the ``hw.lib.lut`` components directly.
    """

    def __init__(self, params: LutUnitParams = LutUnitParams(), *, rom_dir: str = ROM_DIR):
        if not isinstance(params, LutUnitParams):
            reject(self, f"LutUnit needs a LutUnitParams, got {params!r}")
        p = self.params = params
        self.rom_dir = rom_dir
        self.cores = {
            "sigmoid": Sigmoid(rom_dir=rom_dir),
            "silu": Silu(rom_dir=rom_dir),
            "exp2": Exp2Neg(t_bits=p.t_bits, rom_dir=rom_dir),
            "decay": KdaDecay(rom_dir=rom_dir),
            "rsqrt": Rsqrt(m_bits=p.m_bits, frac_bits=p.frac_bits, rom_dir=rom_dir),
            "recip": Recip(m_bits=p.m_bits, frac_bits=p.frac_bits, rom_dir=rom_dir),
        }
        self.cores["apply"] = ApplyMant(v_bits=X.bits, v_frac=p.apply_v_frac, out_frac=p.apply_out_frac,
                                        out_bits=X.bits, e_range=p.apply_e_range)
        self.LATENCY = max(c.LATENCY for c in self.cores.values())
        c = self.cores
        self.in_layout = StructLayout({
            "x": signed(X.bits), "t": unsigned(p.t_bits), "g": signed(X.bits),
            "m": unsigned(p.m_bits), "frac": unsigned(p.frac_bits),
            "v": signed(X.bits), "mant": unsigned(P.bits), "e": c["apply"].in_layout["e"].shape,
        })
        self.out_layout = StructLayout({
            "sigmoid": unsigned(P.bits), "silu": signed(X.bits), "exp2": unsigned(P.bits),
            "decay": unsigned(ALPHA.bits),
            "rsqrt_mant": unsigned(P.bits), "rsqrt_e": c["rsqrt"].out_layout["e"].shape,
            "recip_mant": unsigned(P.bits), "recip_e": c["recip"].out_layout["e"].shape,
            "apply": signed(X.bits),
        })
        super().__init__({"i": In(stream.Signature(self.in_layout)), "o": Out(stream.Signature(self.out_layout))})

    def elaborate(self, platform):
        m = Module()
        c, ip = self.cores, self.i.payload
        en = Signal()
        valid = Signal()
        m.d.comb += [en.eq(~self.o.valid | self.o.ready), self.i.ready.eq(en)]
        for name, core in c.items():
            m.submodules[name] = core
            m.d.comb += [core.en.eq(en), core.i_valid.eq(self.i.valid)]
        m.d.comb += [c["sigmoid"].i.x.eq(ip.x), c["silu"].i.x.eq(ip.x), c["exp2"].i.t.eq(ip.t),
                     c["decay"].i.g.eq(ip.g),
                     c["rsqrt"].i.m.eq(ip.m), c["rsqrt"].i.frac.eq(ip.frac),
                     c["recip"].i.m.eq(ip.m), c["recip"].i.frac.eq(ip.frac),
                     c["apply"].i.v.eq(ip.v), c["apply"].i.mant.eq(ip.mant), c["apply"].i.e.eq(ip.e)]
        pad = lambda name, sig: delay(m, en, sig, self.LATENCY - c[name].LATENCY, f"pad_{name}")  # noqa: E731
        op = self.o.payload
        m.d.comb += [op.sigmoid.eq(pad("sigmoid", c["sigmoid"].o.y)), op.silu.eq(pad("silu", c["silu"].o.y)),
                     op.exp2.eq(pad("exp2", c["exp2"].o.y)), op.decay.eq(pad("decay", c["decay"].o.y)),
                     op.rsqrt_mant.eq(pad("rsqrt", c["rsqrt"].o.mant)), op.rsqrt_e.eq(pad("rsqrt", c["rsqrt"].o.e)),
                     op.recip_mant.eq(pad("recip", c["recip"].o.mant)), op.recip_e.eq(pad("recip", c["recip"].o.e)),
                     op.apply.eq(pad("apply", c["apply"].o.y))]
        m.d.comb += [valid.eq(pad("silu", c["silu"].o_valid)), self.o.valid.eq(valid)]
        return m


# --- rtl_gen hooks (rtl_gen.emit.BLOCKS["lut_unit"]) -----------------------------------------------
def lut_unit_block(chip_params) -> LutUnit:
    """The LUT-unit test block of a chip build (its widths do not depend on ``ChipParams``)."""
    return LutUnit(LutUnitParams())


def lut_unit_derived(chip_params) -> dict:
    p = LutUnitParams()
    lat = {"sigmoid": Sigmoid.LATENCY, "silu": Silu.LATENCY, "exp2": Exp2Neg.LATENCY, "decay": KdaDecay.LATENCY,
           "rsqrt": Rsqrt.LATENCY, "recip": Recip.LATENCY, "apply": ApplyMant.LATENCY}
    exp2 = luts.tables()["exp2"]
    tabs = {name: {"depth": t.depth, "index_bits": t.index_bits, "interp_bits": t.interp_bits,
                   "banks": {b.kind: {"file": b.file, "depth": b.depth, "width": b.width} for b in t.banks}}
            for name, t in luts.tables().items()}
    return {"latency": max(lat.values()), "latencies": lat, "exp2_t_frac": exp2.index_bits + exp2.interp_bits,
            "apply_v_frac": p.apply_v_frac, "apply_out_frac": p.apply_out_frac,
            "apply_e_range": list(p.apply_e_range), "rom_dir": ROM_DIR, "tables": tabs}
