"""LUT evaluation: fixed-latency pipelines that evaluate ``nano_k3.fxp_math``'s table functions bit for bit.

Every width, fraction and table geometry below is read from ``nano_k3.fxp_ops`` (formats X, P, ALPHA),
``nano_k3.fxp_math`` (MANT_FRAC) and ``nano_k3.luts.tables()`` when a component is constructed, so a
change of the fixed-point model's formats or table depths changes the hardware with it.

Every component is a ``hw.lib.pipe.FixedPipe`` (fixed latency, valid bit, enable; ``Streamed`` puts one
behind stream ports, which is what the block tests drive).

Components, their payloads and latencies (widths from the formats at construction time):

============  ==============================================  ==================================  =======
component      ``i`` fields                                    ``o`` fields                        LATENCY
============  ==============================================  ==================================  =======
LutEval        idx[lanes] (index_bits), r[lanes] (interp)      y[lanes] (base_bits): Lut.lookup    3
Sigmoid        x: X                                            y: P  = fxp_math.sigmoid            5
Silu           x: X                                            y: X  = fxp_math.silu               7
Exp2Neg        t: unsigned(t_bits = T.bits), frac T.frac      y: P  = fxp_math.exp2_neg           5
KdaDecay       g: X                                            y: ALPHA = fxp_math.kda_decay       4
Rsqrt          m: unsigned(m_bits) >= 1, frac: unsigned(fb)    mant: P, e: signed = fxp_math.rsqrt 5
Recip          m: unsigned(m_bits) >= 1, frac: unsigned(fb)    mant: P, e: signed = fxp_math.recip 5
ApplyMant      v: signed(v_bits), mant: P, e: signed(e_bits)   y: saturated fxp_math.apply_mant    3
============  ==============================================  ==================================  =======

Stage plans (each stage is one register; the widest arithmetic of a stage is named):
* LutEval: S1 the knots of segment i from the two ROM banks (combinational reads from ``i.idx``):
  delta = the difference of their low bits (low_bits wide) registered with the even-bank knot and r,
  S2 delta·r (delta_bits × interp_bits) beside base = knot[i] (knot[i+1] − delta for an odd i),
  S3 base + round_half_up(product / 2^interp_bits).
* Sigmoid: S0 |x|, inside = |x| < range, sign; LutEval; S4 1 − σ for x < 0, 1 beyond the range.
* Silu: Sigmoid (x delayed beside it); S5 x·σ (X.bits × P.bits); S6 round half up, saturate to X.
* Exp2Neg: S0 split t into integer part n (clamped to base_bits + 1: every larger shift also gives
  0) and fraction; LutEval; S4 rounding right shift by n (barrel shifter + incrementer).
* KdaDecay: S0 clamp g to [−range, range) and offset; LutEval.
* Rsqrt / Recip: S0 leading-zero count (a log-depth tree), S1 barrel shift (truncation exactly as
  ``fxp_ops.normalise``) + table index + exponent; LutEval. ``frac`` is a run-time input so that
  one unit serves RMSNorm of any power-of-two length (tie it to a constant where it is one).
  ``m = 0`` is outside the reference's domain (it raises); the hardware then returns garbage.
* ApplyMant: S0 input register, S1 v·mant (v_bits × 24 b), S2 shift by s = v_frac + 23 − out_frac − e
  (a left shift where s ≤ 0), round half up, saturate to ``out_bits`` (signed or unsigned). ``e``
  must lie in the constructor's ``e_range`` (outside it the result is undefined).

ROM: each LutEval owns its table's two ``msh_rom`` banks or reads through a ``hw.lib.lut_rom.RomPort``
(tables shared between engines; ``hw.lib.lut_rom`` describes the banks and ``rom_dir``).
"""
from __future__ import annotations

from amaranth.hdl import Module, Mux, Signal, signed, unsigned
from amaranth.lib.data import ArrayLayout, StructLayout

from hw.lib.lut_rom import RomPort, shared_rom
from hw.lib.pipe import FixedPipe, clamp, delay, leading_one, reject, round_shift_const
from hw.params import signed_bits
from hw.roms import ROM_DIR
from nano_k3 import fxp_math, luts
from nano_k3.fxp_ops import P, T, X


def table_covers(component, table: str, input_bits: int, what: str):
    """The LUT ``table``; rejects ``component`` unless its index + interp bits are the ``input_bits`` of
    the function's input range ``what`` (in X)."""
    t = luts.tables()[table]
    if t.index_bits + t.interp_bits != input_bits:
        reject(component, f"{table} table: index {t.index_bits} + interp {t.interp_bits} bits do not cover "
                          f"{what} at X.frac={X.frac}")
    return t


class LutEval(FixedPipe):
    """``luts.tables()[name].lookup(idx, r)`` on ``lanes`` (1 or 2) lanes sharing one pair of msh_rom
    banks, or reading through ``port``: a ``RomPort`` of ``shared_rom`` (one lane) or a tuple of one
    per lane."""

    LATENCY = 3

    def __init__(self, name: str, *, lanes: int = 1, rom_dir: str = ROM_DIR,
                 port: RomPort | tuple[RomPort, ...] | None = None):
        tables = luts.tables()
        if name not in tables:
            reject(self, f"unknown LUT {name!r}; valid: {', '.join(sorted(tables))}")
        if lanes not in (1, 2):
            reject(self, f"lanes must be 1 or 2 (msh_rom has two read ports), got {lanes!r}")
        if not isinstance(rom_dir, str) or not rom_dir:
            reject(self, f"rom_dir must be a non-empty path string, got {rom_dir!r}")
        ports = (port,) if isinstance(port, RomPort) else port
        if ports is not None and (not isinstance(ports, tuple) or len(ports) != lanes
                                  or not all(isinstance(p, RomPort) and p.table == name for p in ports)):
            reject(self, f"port must be a RomPort of table {name!r} per lane ({lanes}), got {port!r}")
        self.lut, self.lanes, self.rom_dir, self.ports = tables[name], lanes, rom_dir, ports
        t = self.lut
        lane = StructLayout({"idx": unsigned(t.index_bits), "r": unsigned(t.interp_bits)})
        super().__init__(ArrayLayout(lane, lanes), ArrayLayout(unsigned(t.base_bits), lanes))

    def elaborate(self, platform):
        m = Module()
        t, en = self.lut, self.en
        if self.ports is not None:
            ports = self.ports
        else:
            ports = shared_rom(m, t.name, self.rom_dir, "rom")
            m.d.comb += [a.eq(0) for p in ports[self.lanes:] for a in p.addr]     # read port 2 unused
        half, w = 1 << (t.interp_bits - 1), t.low_bits
        for k in range(self.lanes):
            idx, (even_addr, odd_addr), (even_knot, odd_low) = self.i[k].idx, ports[k].addr, ports[k].data
            odd = idx[0]
            m.d.comb += [even_addr.eq((idx >> 1) + odd), odd_addr.eq(idx >> 1)]     # ceil(i/2), floor(i/2)
            # even_knot is knot[i] (i even) or knot[i+1] (i odd), odd_low the low bits of the other knot. The
            # low-bit subtraction sits behind the ROM read in S1 (5.5 ns at the slow corner with the ROM as
            # logic, as ORFS maps it); the full-width one of the base runs beside the multiplier of S2.
            lo, hi = Mux(odd, odd_low, even_knot[:w]), Mux(odd, even_knot[:w], odd_low)
            delta1 = Signal(signed(t.delta_bits), name=f"delta1_{k}")
            knot1 = Signal(t.knot_bits, name=f"knot1_{k}")
            odd1 = Signal(name=f"odd1_{k}")
            r1 = Signal(t.interp_bits, name=f"r1_{k}")
            prod2 = Signal(signed(t.delta_bits + t.interp_bits + 1), name=f"prod2_{k}")
            base2 = Signal(t.base_bits, name=f"base2_{k}")
            with m.If(en):
                m.d.sync += [delta1.eq((hi - lo)[:w].as_signed()), knot1.eq(even_knot), odd1.eq(odd),
                             r1.eq(self.i[k].r),
                             prod2.eq(delta1 * r1), base2.eq(Mux(odd1, knot1 - delta1, knot1)),
                             self.o[k].eq(base2 + ((prod2 + half) >> t.interp_bits))]
        self._valid_chain(m)
        return m


# --- function-level wrappers ----------------------------------------------------------------------
ONE_P = 1 << P.frac          # 1.0 in P


class Sigmoid(FixedPipe):
    """``fxp_math.sigmoid``: x in X -> P (table on |x| < range, symmetry for x < 0, 1 beyond)."""

    LATENCY = 1 + LutEval.LATENCY + 1

    def __init__(self, *, rom_dir: str = ROM_DIR, port: RomPort | None = None):
        self.rom_dir, self.port = rom_dir, port
        table_covers(self, "sigmoid", (luts.SIGMOID_RANGE << X.frac).bit_length() - 1, f"|x| < {luts.SIGMOID_RANGE}")
        super().__init__(StructLayout({"x": signed(X.bits)}), StructLayout({"y": unsigned(P.bits)}))

    def elaborate(self, platform):
        m = Module()
        en = self.en
        m.submodules.lut = lut = LutEval("sigmoid", rom_dir=self.rom_dir, port=self.port)
        t = lut.lut
        x = self.i.x
        a = Signal(X.bits)
        m.d.comb += a.eq(Mux(x < 0, -x, x))                   # |min X| = 2^(bits-1) still fits unsigned
        inside = Signal()
        m.d.comb += inside.eq(a < (luts.SIGMOID_RANGE << X.frac))
        neg0, in0 = Signal(), Signal()
        with m.If(en):
            m.d.sync += [lut.i[0].idx.eq(Mux(inside, a >> t.interp_bits, 0)),
                         lut.i[0].r.eq(Mux(inside, a[:t.interp_bits], 0)),
                         neg0.eq(x < 0), in0.eq(inside)]
        m.d.comb += lut.en.eq(en)
        neg, ins = delay(m, en, neg0, LutEval.LATENCY, "neg"), delay(m, en, in0, LutEval.LATENCY, "inside")
        val = Mux(ins, lut.o[0], ONE_P)
        with m.If(en):
            m.d.sync += self.o.y.eq(Mux(neg, ONE_P - val, val))
        self._valid_chain(m)
        return m


class Silu(FixedPipe):
    """``fxp_math.silu``: x · sigmoid(x), X -> X, round half up, saturate."""

    LATENCY = Sigmoid.LATENCY + 2

    def __init__(self, *, rom_dir: str = ROM_DIR, port: RomPort | None = None):
        self.rom_dir, self.port = rom_dir, port        # port: the sigmoid table's
        super().__init__(StructLayout({"x": signed(X.bits)}), StructLayout({"y": signed(X.bits)}))

    def elaborate(self, platform):
        m = Module()
        en = self.en
        m.submodules.sig = sig = Sigmoid(rom_dir=self.rom_dir, port=self.port)
        m.d.comb += [sig.en.eq(en), sig.i.x.eq(self.i.x)]
        x = delay(m, en, self.i.x, Sigmoid.LATENCY, "x")
        prod = Signal(signed(X.bits + P.bits + 1))
        with m.If(en):
            m.d.sync += [prod.eq(x * sig.o.y),
                         self.o.y.eq(clamp(round_shift_const(prod, P.frac), X.lo, X.hi))]
        self._valid_chain(m)
        return m


class Exp2Neg(FixedPipe):
    """``fxp_math.exp2_neg``: 2^-t for t >= 0 (fraction bits = the exp2 table's index + interp bits) -> P."""

    LATENCY = 1 + LutEval.LATENCY + 1

    def __init__(self, *, t_bits: int = T.bits, rom_dir: str = ROM_DIR, port: RomPort | None = None):
        t = luts.tables()["exp2"]
        self.t_frac = t.index_bits + t.interp_bits
        if not isinstance(t_bits, int) or not self.t_frac < t_bits <= 64:
            reject(self, f"t_bits must be an integer in {self.t_frac + 1}..64, got {t_bits!r}")
        self.t_bits, self.rom_dir, self.port = t_bits, rom_dir, port
        super().__init__(StructLayout({"t": unsigned(t_bits)}), StructLayout({"y": unsigned(P.bits)}))

    def elaborate(self, platform):
        m = Module()
        en = self.en
        m.submodules.lut = lut = LutEval("exp2", rom_dir=self.rom_dir, port=self.port)
        t = lut.lut
        # A table value is < 2^base_bits, so any right shift n > base_bits rounds it to 0, like n = base_bits + 1.
        n_max = t.base_bits + 1
        n_in = self.i.t[self.t_frac:]
        n0 = Signal(range(n_max + 1))
        with m.If(en):
            m.d.sync += [lut.i[0].idx.eq(self.i.t[t.interp_bits:self.t_frac]),
                         lut.i[0].r.eq(self.i.t[:t.interp_bits]),
                         n0.eq(Mux(n_in > n_max, n_max, n_in))]
        m.d.comb += lut.en.eq(en)
        n = delay(m, en, n0, LutEval.LATENCY, "n")
        val = lut.o[0]
        # (val + 2^(n-1)) >> n == ((2·val >> n) + 1) >> 1 for every n >= 0
        with m.If(en):
            m.d.sync += self.o.y.eq((((val << 1) >> n) + 1) >> 1)
        self._valid_chain(m)
        return m


def decay_table_input(g):
    """KdaDecay's front end: g (X) clamped to [-range, range) and offset to the kda_decay table's input."""
    lim = luts.DECAY_RANGE << X.frac
    return clamp(g, -lim, lim - 1) + lim


class KdaDecay(FixedPipe):
    """``fxp_math.kda_decay``: g in X clamped to [-range, range) -> ALPHA."""

    LATENCY = 1 + LutEval.LATENCY

    def __init__(self, *, rom_dir: str = ROM_DIR):
        self.rom_dir = rom_dir
        lim = luts.DECAY_RANGE << X.frac
        t = table_covers(self, "kda_decay", (2 * lim).bit_length() - 1, f"g in [-{luts.DECAY_RANGE}, {luts.DECAY_RANGE})")
        super().__init__(StructLayout({"g": signed(X.bits)}), StructLayout({"y": unsigned(t.base_bits)}))

    def elaborate(self, platform):
        m = Module()
        en = self.en
        m.submodules.lut = lut = LutEval("kda_decay", rom_dir=self.rom_dir)
        t = lut.lut
        u = Signal(t.index_bits + t.interp_bits)
        m.d.comb += u.eq(decay_table_input(self.i.g))
        with m.If(en):
            m.d.sync += [lut.i[0].idx.eq(u[t.interp_bits:]), lut.i[0].r.eq(u[:t.interp_bits])]
        m.d.comb += [lut.en.eq(en), self.o.y.eq(lut.o[0])]
        self._valid_chain(m)
        return m


class _Normalised(FixedPipe):
    """Shared front end of Rsqrt / Recip: leading-zero count, barrel shift (``fxp_ops.normalise``)."""

    LATENCY = 2 + LutEval.LATENCY
    TABLE = ""

    def __init__(self, *, m_bits: int = 56, frac_bits: int = 7, rom_dir: str = ROM_DIR, port: RomPort | None = None):
        if not isinstance(m_bits, int) or not 2 <= m_bits <= 64:
            reject(self, f"m_bits must be an integer in 2..64, got {m_bits!r}")
        if not isinstance(frac_bits, int) or not 1 <= frac_bits <= 8:
            reject(self, f"frac_bits must be an integer in 1..8, got {frac_bits!r}")
        t = luts.tables()[self.TABLE]
        self.W = fxp_math.MANT_FRAC                       # normalise(m, 23): leading one at bit W
        mant_index_bits = t.index_bits - (1 if self.TABLE == "rsqrt" else 0)
        if mant_index_bits + t.interp_bits != self.W:
            reject(self, f"{self.TABLE} table: {mant_index_bits} mantissa index + {t.interp_bits} interp bits "
                         f"!= MANT_FRAC {self.W}")
        self.m_bits, self.frac_bits, self.rom_dir, self.port = m_bits, frac_bits, rom_dir, port
        self.e_range = self.exponent_range(m_bits, (1 << frac_bits) - 1)
        super().__init__(StructLayout({"m": unsigned(m_bits), "frac": unsigned(frac_bits)}),
                         StructLayout({"mant": unsigned(t.base_bits), "e": signed(signed_bits(*self.e_range))}))

    def elaborate(self, platform):
        m = Module()
        en = self.en
        m.submodules.lut = lut = LutEval(self.TABLE, rom_dir=self.rom_dir, port=self.port)
        t, W, mb = lut.lut, self.W, self.m_bits
        # S0: leading one of m
        _, lead_c = leading_one(m, self.i.m, "lz")
        m0, lead0, frac0 = Signal(mb), Signal(range(mb)), Signal(self.frac_bits)
        with m.If(en):
            m.d.sync += [m0.eq(self.i.m), lead0.eq(lead_c), frac0.eq(self.i.frac)]
        # S1: shift the leading one to the top, keep W + 1 bits (truncation), index and exponent
        pad = max(0, W + 1 - mb)
        wide, lz = Signal(mb + pad), Signal(range(mb))
        m.d.comb += [lz.eq(mb - 1 - lead0), wide.eq((m0 << pad) << lz)]
        man = wide[len(wide) - 1 - W:len(wide) - 1]          # the W bits below the leading one
        e_c = Signal(self.o.e.shape())
        idx_c = Signal(t.index_bits)
        self._index_exponent(m, man, lead0, frac0, idx_c, e_c)
        e1 = Signal.like(e_c)
        with m.If(en):
            m.d.sync += [lut.i[0].idx.eq(idx_c), lut.i[0].r.eq(man[:t.interp_bits]), e1.eq(e_c)]
        m.d.comb += [lut.en.eq(en), self.o.mant.eq(lut.o[0]),
                     self.o.e.eq(delay(m, en, e1, LutEval.LATENCY, "e"))]
        self._valid_chain(m)
        return m


class Rsqrt(_Normalised):
    """``fxp_math.rsqrt(m, frac)``: 1/sqrt(m·2^-frac) = mant·2^-23·2^e, mant UQ1.23 (P), e signed."""

    TABLE = "rsqrt"

    @staticmethod
    def exponent_range(m_bits: int, frac_max: int) -> tuple[int, int]:
        es = [-((lead - f - ((lead - f) & 1)) >> 1) for lead in (0, 1, m_bits - 2, m_bits - 1)
              for f in (0, 1, frac_max - 1, frac_max)]
        return min(es), max(es)

    def _index_exponent(self, m, man, lead, frac, idx, e):
        t = luts.tables()["rsqrt"]
        E = Signal(signed(max(len(lead), len(frac)) + 2))
        m.d.comb += [E.eq(lead - frac),
                     idx.eq(E[0] << (t.index_bits - 1) | (man >> t.interp_bits)),
                     e.eq(-((E - E[0]) >> 1))]


class Recip(_Normalised):
    """``fxp_math.recip(m, frac)``: 1/(m·2^-frac) = mant·2^-23·2^e, mant UQ1.23 (P), e signed."""

    TABLE = "recip"

    @staticmethod
    def exponent_range(m_bits: int, frac_max: int) -> tuple[int, int]:
        return -(m_bits - 1), frac_max

    def _index_exponent(self, m, man, lead, frac, idx, e):
        t = luts.tables()["recip"]
        m.d.comb += [idx.eq(man >> t.interp_bits), e.eq(frac - lead)]


class ApplyMant(FixedPipe):
    """``fxp_math.apply_mant(v, v_frac, mant, e, out_frac)`` saturated to ``out_bits`` (signed or not).

    s = v_frac + MANT_FRAC − out_frac − e ranges over the constructor's ``e_range``; a negative s is
    an exact left shift (then saturated), a positive one rounds half up.

    ``external_mul``: the multiply v × mant is the owner's (members ``mul_a``, ``mul_b``: the operands, from
    the input register; ``mul_p``: their product, read into the product register), so a unit can share one
    multiplier between this and work of its own in other cycles.
    """

    LATENCY = 3

    def __init__(self, *, v_bits: int, v_frac: int, out_frac: int, out_bits: int, e_range: tuple[int, int],
                 out_signed: bool = True, mant_bits: int | None = None, external_mul: bool = False):
        mant_bits = P.bits if mant_bits is None else mant_bits
        for name, val, lo, hi in (("v_bits", v_bits, 2, 64), ("v_frac", v_frac, 0, 64),
                                  ("out_frac", out_frac, 0, 64), ("out_bits", out_bits, 2, 64),
                                  ("mant_bits", mant_bits, 2, 32)):
            if not isinstance(val, int) or isinstance(val, bool) or not lo <= val <= hi:
                reject(self, f"{name} must be an integer in {lo}..{hi}, got {val!r}")
        if (not isinstance(e_range, tuple) or len(e_range) != 2 or not all(isinstance(x, int) for x in e_range)
                or e_range[0] > e_range[1]):
            reject(self, f"e_range must be a (lo, hi) tuple of integers with lo <= hi, got {e_range!r}")
        self.v_bits, self.v_frac, self.out_frac, self.out_bits = v_bits, v_frac, out_frac, out_bits
        self.e_range, self.out_signed, self.mant_bits = e_range, out_signed, mant_bits
        self.external_mul = bool(external_mul)
        c = v_frac + fxp_math.MANT_FRAC - out_frac
        self.s_range = (c - e_range[1], c - e_range[0])
        if self.s_range[0] < -64 or self.s_range[1] > 128:
            reject(self, f"shift range {self.s_range} (from e_range {e_range}) is unreasonably wide")
        e_bits = signed_bits(*e_range)
        out_shape = signed(out_bits) if out_signed else unsigned(out_bits)
        super().__init__(StructLayout({"v": signed(v_bits), "mant": unsigned(mant_bits), "e": signed(e_bits)}),
                         StructLayout({"y": out_shape}))
        if self.external_mul:
            self.mul_a, self.mul_b = Signal(signed(v_bits), name="mul_a"), Signal(unsigned(mant_bits), name="mul_b")
            self.mul_p = Signal(signed(v_bits + mant_bits + 1), name="mul_p")

    @property
    def out_range(self) -> tuple[int, int]:
        if self.out_signed:
            return -(1 << (self.out_bits - 1)), (1 << (self.out_bits - 1)) - 1
        return 0, (1 << self.out_bits) - 1

    def elaborate(self, platform):
        m = Module()
        en = self.en
        s_lo, s_hi = self.s_range
        c = self.v_frac + fxp_math.MANT_FRAC - self.out_frac
        i0 = Signal(self.in_layout)
        with m.If(en):
            m.d.sync += i0.eq(self.i)
        prod = Signal(signed(self.v_bits + self.mant_bits + 1))
        sh = Signal(range(s_hi - min(s_lo, 0) + 1))            # s + max(0, -s_lo) >= 0
        left = max(0, -s_lo)
        if self.external_mul:
            m.d.comb += [self.mul_a.eq(i0.v), self.mul_b.eq(i0.mant)]
        with m.If(en):
            m.d.sync += [prod.eq(self.mul_p if self.external_mul else i0.v * i0.mant), sh.eq(c - i0.e + left)]
        # u = prod · 2^left (exact); then a rounding right shift by sh: ((2u >> sh) + 1) >> 1
        u2 = Signal(signed(len(prod) + left + 1))
        m.d.comb += u2.eq(prod << (left + 1))
        res = Signal(signed(len(u2)))                          # (t + 1) >> 1 fits wherever t = u2 >> sh does
        m.d.comb += res.eq(((u2 >> sh) + 1) >> 1)
        lo, hi = self.out_range
        with m.If(en):
            m.d.sync += self.o.y.eq(clamp(res, lo, hi))
        self._valid_chain(m)
        return m
