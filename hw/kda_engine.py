"""The KDA engine: one position of a Kimi-Delta-Attention layer after its input projections.

Reference: ``nano_k3.fixed`` (``kda_conv``, ``fxp_math.l2norm``, ``kda_beta``, ``kda_alpha``,
``kda_state_update``, ``gated_norm``) composed as in ``FixedModel._kda``; formats are
``nano_k3.fxp_ops`` (docs/fixed_point.md), read at construction time, never repeated here.

Input ``i`` (one element per transfer, any order within a position, ``last`` on the final one):
``sel`` says which vector the element belongs to and ``idx`` its index (0..P-1; for B the head):
  Q/K/V  pre-conv projections (X) with the channel's conv ``taps`` (Q4.11, tap K-1 = current input)
  B      beta logit of head ``idx`` (X)
  F      decay input f (X) with ``a`` = A of its head (UQ8.8) and ``dtb`` of the channel (Q4.11)
  Z      output gate z (X) with ``w`` = onorm.w[idx mod dh] (Q2.13)
``layer`` (region of the state / history SRAMs) and ``restart`` (first position of a sequence: the
conv histories and the state read as zero, so SRAM contents at power-up never matter) must be the
same on every element of a position.

Output ``o``: the gated, head-concatenated vector (P elements of X, index order, ``last`` on the
final one) and, for verification, the read-out ``read`` = q_hat . S' (format S) of the same index.

Micro-architecture (dh lanes, lane j = state column j; SRAM words = one state row):
  ingest   element pipeline (1/cycle): conv window from the history SRAM, taps, SiLU / sigmoid /
           decay by LUT, into the position buffer SRAM (q, k, v, alpha, sigmoid(z), w per index);
           running sums of q^2, k^2 per head for the L2 norms.
  per head rsqrt(k), rsqrt(q) | pass 1 over rows i: decay S[i] by alpha[i], write back, kS += k_hat[i] S'[i]
           (q_hat, k_hat stored in the buffer) | u = v - kS, beta u | pass 2 over rows: S'' = S' + k_hat[i] beta u,
           write back, read += q_hat[i] S''[i] | sum read^2 | rsqrt | gated output pipeline (back-pressured).
Every lane multiply (24 x 24) has a stage of its own; rounding shifts and saturation take the next one.
"""
from __future__ import annotations

import enum
import math
from dataclasses import dataclass

from amaranth.hdl import Array, ClockSignal, Const, Instance, Module, Mux, Signal, signed, unsigned
from amaranth.lib import stream, wiring
from amaranth.lib.data import ArrayLayout, StructLayout
from amaranth.lib.wiring import In, Out

from hw.kda_lut import Rsqrt, lut_rom
from nano_k3 import fxp_math
from nano_k3 import luts as L
from nano_k3.config import L2_EPS, RMS_EPS
from nano_k3.fxp_ops import ALPHA, SQ_FRAC, UNIT, P, S, X
from nano_k3.tensors import PARAM_FORMATS

PARAM_BITS = 16                                   # every small parameter is an int16 / uint16 (SPEC §4.4)
TAP_FRAC = PARAM_FORMATS["q4_11"][0]              # conv taps, dtb
A_FRAC = PARAM_FORMATS["uq8_8"][0]                # A
W_FRAC = PARAM_FORMATS["norm"][0]                 # onorm.w, gain = 2^W_FRAC + w


class Sel(enum.IntEnum):
    Q = 0
    K = 1
    V = 2
    B = 3
    F = 4
    Z = 5


def _int_in(name, value, lo, hi):
    if not isinstance(value, int) or isinstance(value, bool) or not lo <= value <= hi:
        raise ValueError(f"{name} must be an integer in {lo}..{hi}, got {value!r}")


def _bytes(bits: int) -> int:
    return -(-bits // 8) * 8


@dataclass(frozen=True)
class KdaParams:
    """Dimensions of one KDA engine build (proposed for merging into hw.params.ChipParams)."""

    heads: int = 2
    dh: int = 32
    conv_k: int = 4
    max_layers: int = 2

    def __post_init__(self) -> None:
        _int_in("heads", self.heads, 1, 16)
        _int_in("dh", self.dh, 2, 256)
        if self.dh & (self.dh - 1):
            raise ValueError(f"dh must be a power of two (the RMS mean is a shift), got {self.dh}")
        _int_in("conv_k", self.conv_k, 2, 8)
        _int_in("max_layers", self.max_layers, 1, 64)

    @property
    def width(self) -> int:
        return self.heads * self.dh


def in_layout(p: KdaParams) -> StructLayout:
    return StructLayout({
        "sel": unsigned(3),
        "idx": unsigned(max(1, (p.width - 1).bit_length())),
        "data": signed(X.bits),
        "taps": ArrayLayout(signed(PARAM_BITS), p.conv_k),
        "a": unsigned(PARAM_BITS),
        "dtb": signed(PARAM_BITS),
        "w": signed(PARAM_BITS),
        "layer": unsigned(max(1, (p.max_layers - 1).bit_length())),
        "restart": unsigned(1),
        "last": unsigned(1),
    })


def out_layout(p: KdaParams) -> StructLayout:
    return StructLayout({"data": signed(X.bits), "read": signed(S.bits), "last": unsigned(1)})


def _rs(v, s: int):
    """Round half up by a constant shift (fxp_ops.round_shift); a left shift for s <= 0."""
    return (v + (1 << (s - 1))) >> s if s > 0 else v << (-s)


def _rs_var(v, sm1):
    """Round half up by a variable shift s >= 1, given s - 1: floor((floor(v / 2^(s-1)) + 1) / 2)."""
    return ((v >> sm1) + 1) >> 1


def _clip(v, fmt):
    return Mux(v > fmt.hi, fmt.hi, Mux(v < fmt.lo, fmt.lo, v))


def _apply_shift_range(ss_lo: int, ss_hi: int, frac: int, v_frac: int, out_frac: int) -> tuple[int, int]:
    """Range of the apply_mant shift v_frac + 23 - e - out_frac over every rsqrt input in [ss_lo, ss_hi]."""
    shifts = []
    for lead in range(ss_lo.bit_length() - 1, ss_hi.bit_length()):
        E = lead - frac
        e = -((E - (E & 1)) >> 1)
        shifts.append(v_frac + fxp_math.MANT_FRAC - e - out_frac)
    return min(shifts), max(shifts)


class KdaEngine(wiring.Component):
    """KDA token mixer core for one position (see module docstring)."""

    E_LAT = 11          # ingest pipeline depth (accept -> last accumulation)

    def __init__(self, params: KdaParams):
        if not isinstance(params, KdaParams):
            self._MustUse__silence = True
            raise TypeError(f"KdaEngine needs a hw.kda_engine.KdaParams, got {params!r}")
        if S.frac < X.frac:
            self._MustUse__silence = True
            raise ValueError(f"S.frac={S.frac} < X.frac={X.frac}: v cannot be aligned to S by a left shift")
        self.params = p = params
        dh = p.dh
        self.lg_dh = dh.bit_length() - 1
        # rsqrt inputs and the apply_mant shift ranges, from the formats
        # sums of squares are exact, then rounded once to SQ_FRAC (fxp_math.sum_squares) plus eps
        self.l2_bits = 2 * X.bits + self.lg_dh
        self.l2_eps = fxp_math.eps_int(L2_EPS, SQ_FRAC)
        self.rn_bits = 2 * S.bits + self.lg_dh
        self.rn_eps = fxp_math.eps_int(RMS_EPS * dh * dh, SQ_FRAC)
        self.l2_sq_shift, self.rn_sq_shift = 2 * X.frac - SQ_FRAC, 2 * S.frac - SQ_FRAC
        self.l2_frac, self.rn_frac = SQ_FRAC, SQ_FRAC + self.lg_dh
        l2_hi = (dh << (2 * X.bits - 2)) >> max(0, self.l2_sq_shift) << max(0, -self.l2_sq_shift)
        rn_hi = (dh << (2 * S.bits - 2)) >> max(0, self.rn_sq_shift) << max(0, -self.rn_sq_shift)
        self.l2_shift = _apply_shift_range(self.l2_eps, self.l2_eps + l2_hi + 1, self.l2_frac, X.frac, UNIT.frac)
        self.rn_shift = _apply_shift_range(self.rn_eps, self.rn_eps + rn_hi + 1, self.rn_frac, S.frac, X.frac)
        for what, (lo, hi) in (("l2", self.l2_shift), ("rmsnorm", self.rn_shift)):
            if lo < 1:
                self._MustUse__silence = True
                raise ValueError(f"{what} apply_mant shift range {lo}..{hi} includes a left shift; unsupported")
        super().__init__({
            "i": In(stream.Signature(in_layout(p))),
            "o": Out(stream.Signature(out_layout(p))),
        })

    def elaborate(self, platform):
        m = Module()
        p = self.params
        H, dh, K, Pw = p.heads, p.dh, p.conv_k, p.width
        ip = self.i.payload

        # ---- storage -------------------------------------------------------------------------
        st_depth = max(2, p.max_layers * H * dh)
        st_w = _bytes(dh * S.bits)
        hi_depth = max(2, p.max_layers * 3 * Pw)
        hi_w = _bytes((K - 1) * X.bits)
        fq = _bytes(max(X.bits, UNIT.bits))
        fields = {"q": fq, "k": fq, "v": _bytes(X.bits), "alpha": _bytes(ALPHA.bits), "sigz": _bytes(P.bits),
                  "w": PARAM_BITS}
        off, o = {}, 0
        for name, w in fields.items():
            off[name] = o
            o += w
        bf_w, bf_depth = o, max(2, Pw)

        def sram(name, depth, width):
            ports = {n: Signal(w, name=f"{name}_{n}") for n, w in (
                ("we", 1), ("waddr", (depth - 1).bit_length()), ("wdata", width), ("wstrb", width // 8),
                ("re", 1), ("raddr", (depth - 1).bit_length()), ("rdata", width))}
            m.submodules[name] = Instance(
                "msh_sram", p_DEPTH=depth, p_WIDTH=width, p_ADDRW=(depth - 1).bit_length(), i_clk=ClockSignal(),
                i_we=ports["we"], i_waddr=ports["waddr"], i_wdata=ports["wdata"], i_wstrb=ports["wstrb"],
                i_re=ports["re"], i_raddr=ports["raddr"], o_rdata=ports["rdata"])
            return ports

        st = sram("kda_state_sram", st_depth, st_w)
        hs = sram("kda_hist_sram", hi_depth, hi_w)
        bf = sram("kda_buf_sram", bf_depth, bf_w)

        def strb(*names):
            v = 0
            for n in names:
                for b in range(off[n] // 8, (off[n] + fields[n]) // 8):
                    v |= 1 << b
            return v

        # ---- control state ---------------------------------------------------------------------
        layer = Signal.like(ip.layer)
        restart = Signal()
        head = Signal(range(max(2, H)))
        beta = Array(Signal(P.bits, name=f"beta_{h}") for h in range(H))
        ssq = Array(Signal(self.l2_bits, name=f"ssq_{h}") for h in range(H))
        ssk = Array(Signal(self.l2_bits, name=f"ssk_{h}") for h in range(H))
        cnt = Signal(range(dh + 16))
        ingest = Signal()
        clear_ss = Signal()

        rsq_bits = max(self.l2_bits, self.rn_bits) + 1 + max(0, -self.l2_sq_shift, -self.rn_sq_shift)
        rsq = m.submodules.rsqrt = Rsqrt(rsq_bits, (self.l2_frac, self.rn_frac))
        mant_k, mant_q, mant_o = (Signal(len(rsq.o_mant), name=n) for n in ("mant_k", "mant_q", "mant_o"))
        sk_m1, sq_m1, so_m1 = (Signal(8, name=n) for n in ("sk_m1", "sq_m1", "so_m1"))

        # ---- ingest pipeline -------------------------------------------------------------------
        m.d.comb += self.i.ready.eq(ingest)
        take = Signal()
        m.d.comb += take.eq(self.i.valid & self.i.ready)
        hist_addr = Signal.like(hs["raddr"])
        sel_i = Signal(3)
        m.d.comb += [sel_i.eq(ip.sel), hist_addr.eq(ip.layer * (3 * Pw) + Mux(sel_i > 2, 0, sel_i) * Pw + ip.idx)]
        m.d.comb += [hs["re"].eq(take), hs["raddr"].eq(hist_addr)]

        def stage(name, shape, src, en=None):
            s = Signal(shape, name=name)
            m.d.sync += s.eq(src)
            return s

        e1v = stage("e1v", 1, take)
        e1 = stage("e1", in_layout(p), ip)
        e1a = stage("e1_haddr", len(hist_addr), hist_addr)
        e1rst = stage("e1_rst", 1, ip.restart)
        hword = Signal(hi_w)
        m.d.comb += hword.eq(Mux(e1rst, 0, hs["rdata"]))
        window = [hword[j * X.bits:(j + 1) * X.bits].as_signed() for j in range(K - 1)] + [e1.data]
        is_conv = Signal()
        m.d.comb += is_conv.eq(e1.sel <= Sel.V)
        new_hist = Signal(hi_w)
        m.d.comb += new_hist.eq(Const(0, hi_w))
        for j in range(K - 1):
            m.d.comb += new_hist[j * X.bits:(j + 1) * X.bits].eq(window[j + 1])
        m.d.comb += [hs["we"].eq(e1v & is_conv), hs["waddr"].eq(e1a), hs["wdata"].eq(new_hist),
                     hs["wstrb"].eq((1 << (hi_w // 8)) - 1)]
        # e2: conv products; f + dtb
        prod_w = X.bits + PARAM_BITS
        e2v, e2sel, e2idx, e2w = stage("e2v", 1, e1v), stage("e2sel", 3, e1.sel), stage("e2idx", len(e1.idx), e1.idx), \
            stage("e2w", signed(PARAM_BITS), e1.w)
        e2data = stage("e2data", signed(X.bits), e1.data)
        e2p = [stage(f"e2p{j}", signed(prod_w), window[j] * e1.taps[j]) for j in range(K)]
        e2fx = stage("e2fx", signed(X.bits + 2), e1.data + (e1.dtb << (X.frac - TAP_FRAC)))
        e2a = stage("e2a", unsigned(PARAM_BITS), e1.a)
        # e3: conv sum; (f + dtb) * A
        e3v, e3sel, e3idx, e3w, e3data = (stage("e3v", 1, e2v), stage("e3sel", 3, e2sel),
                                           stage("e3idx", len(e2idx), e2idx), stage("e3w", signed(PARAM_BITS), e2w),
                                           stage("e3data", signed(X.bits), e2data))
        e3sum = stage("e3sum", signed(prod_w + 3), sum(e2p[1:], e2p[0]))
        e3g = stage("e3g", signed(X.bits + 2 + PARAM_BITS + 1), e2fx * e2a)
        # e4: requantise to X: conv -> X.fit(frac + 11); F -> X.fit(frac + 8); B, Z pass
        e4v, e4sel, e4idx, e4w = (stage("e4v", 1, e3v), stage("e4sel", 3, e3sel), stage("e4idx", len(e3idx), e3idx),
                                  stage("e4w", signed(PARAM_BITS), e3w))
        x4 = Signal(signed(X.bits))
        with m.If(e3sel <= Sel.V):
            m.d.sync += x4.eq(_clip(_rs(e3sum, TAP_FRAC), X))
        with m.Elif(e3sel == Sel.F):
            m.d.sync += x4.eq(_clip(_rs(e3g, A_FRAC), X))
        with m.Else():
            m.d.sync += x4.eq(e3data)
        # e5: table indices (sigmoid of |x|, decay of clamp(g))
        e5v, e5sel, e5idx, e5w, x5 = (stage("e5v", 1, e4v), stage("e5sel", 3, e4sel),
                                      stage("e5idx", len(e4idx), e4idx), stage("e5w", signed(PARAM_BITS), e4w),
                                      stage("x5", signed(X.bits), x4))
        ts, td = L.tables()["sigmoid"], L.tables()["kda_decay"]
        absx = Signal(unsigned(X.bits))
        m.d.comb += absx.eq(Mux(x4 < 0, -x4, x4))
        inside = absx < (L.SIGMOID_RANGE << X.frac)
        ac = Mux(inside, absx, 0)
        e5in, e5neg = stage("e5in", 1, inside), stage("e5neg", 1, x4 < 0)
        sig_i = stage("sig_i", ts.index_bits, ac >> L.SIGMOID_INTERP)
        sig_r = stage("sig_r", L.SIGMOID_INTERP, ac[:L.SIGMOID_INTERP])
        lim = L.DECAY_RANGE << X.frac
        uu = Signal(unsigned(X.bits + 1))
        m.d.comb += uu.eq(Mux(x4 < -lim, 0, Mux(x4 > lim - 1, 2 * lim - 1, x4 + lim)))
        dec_i = stage("dec_i", td.index_bits, uu >> L.DECAY_INTERP)
        dec_r = stage("dec_r", L.DECAY_INTERP, uu[:L.DECAY_INTERP])
        # e6: ROM + interpolation
        e6v, e6sel, e6idx, e6w, x6, e6in, e6neg = (
            stage("e6v", 1, e5v), stage("e6sel", 3, e5sel), stage("e6idx", len(e5idx), e5idx),
            stage("e6w", signed(PARAM_BITS), e5w), stage("x6", signed(X.bits), x5), stage("e6in", 1, e5in),
            stage("e6neg", 1, e5neg))
        sig6 = Signal(ts.base_bits + 1)
        dec6 = Signal(td.base_bits + 1)
        lut_rom(m, "sigmoid", sig_i, sig_r, sig6, tag="sig")
        lut_rom(m, "kda_decay", dec_i, dec_r, dec6, tag="dec")
        # e7: sigmoid symmetry; decay passes
        one_p = fxp_math.ONE_P
        e7v, e7sel, e7idx, e7w, x7 = (stage("e7v", 1, e6v), stage("e7sel", 3, e6sel),
                                      stage("e7idx", len(e6idx), e6idx), stage("e7w", signed(PARAM_BITS), e6w),
                                      stage("x7", signed(X.bits), x6))
        sv = Mux(e6in, sig6, one_p)
        y7 = stage("y7", unsigned(P.bits + 1), Mux(e6sel == Sel.F, dec6, Mux(e6neg, one_p - sv, sv)))
        # e8: SiLU multiply
        e8v, e8sel, e8idx, e8w, y8 = (stage("e8v", 1, e7v), stage("e8sel", 3, e7sel),
                                      stage("e8idx", len(e7idx), e7idx), stage("e8w", signed(PARAM_BITS), e7w),
                                      stage("y8", unsigned(P.bits + 1), y7))
        silu8 = stage("silu8", signed(X.bits + P.bits + 2), x7 * y7)
        # e9: requantise the SiLU; write the buffer
        e9v, e9sel, e9idx = stage("e9v", 1, e8v), stage("e9sel", 3, e8sel), stage("e9idx", len(e8idx), e8idx)
        c9 = stage("c9", signed(X.bits), _clip(_rs(silu8, P.frac), X))
        bword = Signal(bf_w)
        m.d.comb += bword.eq(0)
        wstrb_ing = Signal(bf_w // 8)
        with m.Switch(e8sel):
            for s, name in ((Sel.Q, "q"), (Sel.K, "k"), (Sel.V, "v")):
                with m.Case(s):
                    m.d.comb += [bword[off[name]:off[name] + X.bits].eq(_clip(_rs(silu8, P.frac), X)),
                                 wstrb_ing.eq(strb(name))]
            with m.Case(Sel.F):
                m.d.comb += [bword[off["alpha"]:off["alpha"] + ALPHA.bits].eq(y8), wstrb_ing.eq(strb("alpha"))]
            with m.Case(Sel.Z):
                m.d.comb += [bword[off["sigz"]:off["sigz"] + P.bits].eq(y8), bword[off["w"]:off["w"] + PARAM_BITS].eq(e8w),
                             wstrb_ing.eq(strb("sigz", "w"))]
            with m.Case(Sel.B):
                with m.If(e8v):
                    m.d.sync += beta[e8idx[:max(1, (H - 1).bit_length())] if H > 1 else 0].eq(y8)
        # e10: squares for the L2 norms; e11: per-head sums
        e10v, e10sel = stage("e10v", 1, e9v), stage("e10sel", 3, e9sel)
        e10h = stage("e10h", range(max(2, H)), e9idx >> self.lg_dh)
        sq10 = stage("sq10", unsigned(2 * X.bits), c9 * c9)
        with m.If(clear_ss):
            m.d.sync += [s.eq(0) for s in (*ssq, *ssk)]
        with m.Elif(e10v & (e10sel == Sel.Q)):
            m.d.sync += ssq[e10h].eq(ssq[e10h] + sq10)
        with m.Elif(e10v & (e10sel == Sel.K)):
            m.d.sync += ssk[e10h].eq(ssk[e10h] + sq10)

        # ---- lanes -----------------------------------------------------------------------------
        lanes = range(dh)
        vl = [Signal(signed(X.bits), name=f"v_{j}") for j in lanes]
        bu = [Signal(signed(S.bits + 1), name=f"bu_{j}") for j in lanes]
        rd = [Signal(signed(S.bits), name=f"read_{j}") for j in lanes]
        pa_w = max(S.bits + ALPHA.bits + 1, S.bits + 1 + UNIT.bits)
        pb_w = S.bits + UNIT.bits
        acc_w = pb_w + self.lg_dh + 1
        acc = [Signal(signed(acc_w), name=f"acc_{j}") for j in lanes]
        pa = [Signal(signed(pa_w), name=f"pa_{j}") for j in lanes]     # lane product A
        pb = [Signal(signed(pb_w), name=f"pb_{j}") for j in lanes]     # lane product B
        s2 = [Signal(signed(S.bits), name=f"srow2_{j}") for j in lanes]          # S' (pass 1) / S'' (pass 2)
        srow1 = [Signal(signed(S.bits), name=f"srow1_{j}") for j in lanes]       # S' row carried in pass 2

        # row pipeline control: r1 = SRAM data valid, r2 = products, r3 = rounded row, r4 = accumulate
        pass2 = Signal()
        issue = Signal()
        r1v, r2v, r3v, r4v = Signal(), Signal(), Signal(), Signal()
        row = Signal(range(dh + 1))
        r1row, r2row, r3row = Signal(range(dh)), Signal(range(dh)), Signal(range(dh))
        m.d.sync += [r1v.eq(issue), r2v.eq(r1v), r3v.eq(r2v), r4v.eq(r3v), r2row.eq(r1row), r3row.eq(r2row)]
        st_base = Signal(len(st["raddr"]))
        m.d.comb += st_base.eq(layer * (H * dh) + head * dh)
        bf_base = Signal(len(bf["raddr"]))
        m.d.comb += bf_base.eq(head * dh)
        with m.If(issue):
            m.d.sync += r1row.eq(row)
        m.d.comb += [st["re"].eq(issue), st["raddr"].eq(st_base + row)]

        # r1: SRAM row and buffer word
        srow = [Mux(restart & ~pass2, 0, st["rdata"][j * S.bits:(j + 1) * S.bits].as_signed()) for j in lanes]
        bq = bf["rdata"][off["q"]:off["q"] + X.bits].as_signed()          # pass 1: q (X)
        bk = bf["rdata"][off["k"]:off["k"] + X.bits].as_signed()
        bq_hat = bf["rdata"][off["q"]:off["q"] + UNIT.bits].as_signed()  # pass 2: q_hat (UNIT)
        bk_hat = bf["rdata"][off["k"]:off["k"] + UNIT.bits].as_signed()
        bv = bf["rdata"][off["v"]:off["v"] + X.bits].as_signed()
        balpha = bf["rdata"][off["alpha"]:off["alpha"] + ALPHA.bits]
        bsigz = bf["rdata"][off["sigz"]:off["sigz"] + P.bits]
        bw = bf["rdata"][off["w"]:off["w"] + PARAM_BITS].as_signed()
        kprod = Signal(signed(X.bits + len(mant_k) + 1))
        qprod = Signal(signed(X.bits + len(mant_q) + 1))
        q_hat1 = Signal(signed(UNIT.bits))     # pass 2: q_hat[i] from the buffer, for the r3 multiply
        q_hat2 = Signal(signed(UNIT.bits))
        k_hat2 = Signal(signed(UNIT.bits))
        q_hat2b = Signal(signed(UNIT.bits))
        with m.If(r1v):
            with m.If(~pass2):
                m.d.sync += [pa[j].eq(srow[j] * balpha) for j in lanes]
                m.d.sync += [kprod.eq(bk * mant_k), qprod.eq(bq * mant_q)]
                for j in lanes:
                    with m.If(r1row == j):
                        m.d.sync += vl[j].eq(bv)
            with m.Else():
                m.d.sync += [pa[j].eq(bu[j] * bk_hat) for j in lanes]
                m.d.sync += [srow1[j].eq(srow[j]) for j in lanes]
                m.d.sync += q_hat1.eq(bq_hat)
        # r2: pass 1: S' = round(S alpha), k_hat, q_hat; pass 2: S'' = sat(S' + round(k_hat bu))
        with m.If(r2v):
            with m.If(~pass2):
                m.d.sync += [s2[j].eq(_rs(pa[j], ALPHA.frac)) for j in lanes]
                m.d.sync += [k_hat2.eq(_clip(_rs_var(kprod, sk_m1), UNIT)), q_hat2.eq(_clip(_rs_var(qprod, sq_m1), UNIT))]
            with m.Else():
                m.d.sync += [s2[j].eq(_clip(srow1[j] + _rs(pa[j], UNIT.frac), S)) for j in lanes]
                m.d.sync += q_hat2b.eq(q_hat1)
        # r3: write the row back; lane product B; pass 1 stores q_hat, k_hat in the buffer
        st_wrow = Signal(len(st["waddr"]))
        m.d.comb += st_wrow.eq(st_base + r3row)
        m.d.comb += [st["we"].eq(r3v), st["waddr"].eq(st_wrow), st["wstrb"].eq((1 << (st_w // 8)) - 1)]
        for j in lanes:
            m.d.comb += st["wdata"][j * S.bits:(j + 1) * S.bits].eq(s2[j])
        with m.If(r3v):
            m.d.sync += [pb[j].eq(s2[j] * Mux(pass2, q_hat2b, k_hat2)) for j in lanes]
        with m.If(r4v):
            m.d.sync += [acc[j].eq(acc[j] + pb[j]) for j in lanes]

        # ---- buffer SRAM port sharing: ingest writes, pass-1 writes q_hat / k_hat, reads by the rows or the output
        out_re, out_raddr = Signal(), Signal(len(bf["raddr"]))
        m.d.comb += [bf["re"].eq(issue | out_re), bf["raddr"].eq(Mux(issue, bf_base + row, out_raddr))]
        hat_word = Signal(bf_w)
        m.d.comb += [hat_word[off["q"]:off["q"] + UNIT.bits].eq(q_hat2), hat_word[off["k"]:off["k"] + UNIT.bits].eq(k_hat2)]
        with m.If(r3v & ~pass2):
            m.d.comb += [bf["we"].eq(1), bf["waddr"].eq(bf_base + r3row), bf["wdata"].eq(hat_word),
                         bf["wstrb"].eq(strb("q", "k"))]
        with m.Else():
            m.d.comb += [bf["we"].eq(e8v & (e8sel != Sel.B)), bf["waddr"].eq(e8idx), bf["wdata"].eq(bword),
                         bf["wstrb"].eq(wstrb_ing)]

        # ---- gated-norm output pipeline (advances when the output register is free) --------------
        adv = Signal()
        m.d.comb += adv.eq(~self.o.valid | self.o.ready)
        o_issue = Signal()
        ocol = Signal(range(dh + 1))
        o1v, o2v, o3v, o4v, o5v = Signal(), Signal(), Signal(), Signal(), Signal()
        o1c = Signal(range(dh))
        o1last, o2last, o3last, o4last, o5last = Signal(), Signal(), Signal(), Signal(), Signal()
        y_bits = X.frac + self.lg_dh // 2 + 4 + 1
        o2p = Signal(signed(S.bits + len(mant_o) + 1))
        o3y = Signal(signed(y_bits))
        o4g = Signal(signed(y_bits + PARAM_BITS + 2))
        o5x = Signal(signed(X.bits))
        o2s, o3s, o4s, o5s = (Signal(P.bits, name=f"sigz{k}") for k in range(2, 6))
        o2r, o3r, o4r, o5r = (Signal(signed(S.bits), name=f"ord{k}") for k in range(2, 6))
        o3w, o2w = Signal(signed(PARAM_BITS)), Signal(signed(PARAM_BITS))
        last_head = Signal()
        m.d.comb += [out_re.eq(o_issue & adv), out_raddr.eq(bf_base + ocol)]
        rd_arr = Array(rd)
        gprod = Signal(signed(X.bits + P.bits + 2))
        m.d.comb += gprod.eq(o5x * o5s)
        with m.If(adv):
            m.d.sync += [o1v.eq(o_issue), o2v.eq(o1v), o3v.eq(o2v), o4v.eq(o3v), o5v.eq(o4v),
                         o2last.eq(o1last), o3last.eq(o2last), o4last.eq(o3last), o5last.eq(o4last)]
            with m.If(o_issue):
                m.d.sync += [o1c.eq(ocol), o1last.eq(last_head & (ocol == dh - 1))]
            m.d.sync += [o2p.eq(rd_arr[o1c] * mant_o), o2s.eq(bsigz), o2w.eq(bw), o2r.eq(rd_arr[o1c])]
            m.d.sync += [o3y.eq(_rs_var(o2p, so_m1)), o3s.eq(o2s), o3w.eq(o2w), o3r.eq(o2r)]
            m.d.sync += [o4g.eq(o3y * ((1 << W_FRAC) + o3w)), o4s.eq(o3s), o4r.eq(o3r)]
            m.d.sync += [o5x.eq(_clip(_rs(o4g, W_FRAC), X)), o5s.eq(o4s), o5r.eq(o4r)]
            m.d.sync += [self.o.valid.eq(o5v), self.o.payload.data.eq(_clip(_rs(gprod, P.frac), X)),
                         self.o.payload.read.eq(o5r), self.o.payload.last.eq(o5last)]

        # ---- sum of read^2 (serial, for the gated RMSNorm) -------------------------------------
        ss_on, sq_v = Signal(), Signal()
        sqr = Signal(unsigned(2 * S.bits))
        ss_o = Signal(self.rn_bits)
        m.d.sync += [sq_v.eq(ss_on), sqr.eq(rd_arr[cnt] * rd_arr[cnt])]
        with m.If(sq_v):
            m.d.sync += ss_o.eq(ss_o + sqr)

        # ---- rsqrt requests ---------------------------------------------------------------------
        hsel = Signal(range(max(2, H)))
        m.d.comb += hsel.eq(head)
        rs_req = Signal(2)     # 1: k, 2: q, 3: gated norm

        with m.Switch(rs_req):
            with m.Case(1):
                m.d.comb += [rsq.i_valid.eq(1), rsq.i_ss.eq(_rs(ssk[hsel], self.l2_sq_shift) + self.l2_eps),
                             rsq.i_sel.eq(0)]
            with m.Case(2):
                m.d.comb += [rsq.i_valid.eq(1), rsq.i_ss.eq(_rs(ssq[hsel], self.l2_sq_shift) + self.l2_eps),
                             rsq.i_sel.eq(0)]
            with m.Case(3):
                m.d.comb += [rsq.i_valid.eq(1), rsq.i_ss.eq(_rs(ss_o, self.rn_sq_shift) + self.rn_eps),
                             rsq.i_sel.eq(1)]
        l2_c = X.frac + fxp_math.MANT_FRAC - UNIT.frac - 1     # shift - 1 = C - e - 1
        rn_c = S.frac + fxp_math.MANT_FRAC - X.frac - 1

        # ---- sequencer ------------------------------------------------------------------------
        bu_prod = [Signal(signed(S.bits + P.bits + 2), name=f"bup_{j}") for j in lanes]
        u_l = [Signal(signed(S.bits), name=f"u_{j}") for j in lanes]
        with m.FSM(init="INGEST"):
            with m.State("INGEST"):
                m.d.comb += ingest.eq(1)
                with m.If(take):
                    m.d.sync += [layer.eq(ip.layer), restart.eq(ip.restart)]
                    with m.If(ip.last):
                        m.d.sync += [cnt.eq(0), head.eq(0)]
                        m.next = "DRAIN"
            with m.State("DRAIN"):
                m.d.sync += cnt.eq(cnt + 1)
                with m.If(cnt == self.E_LAT):
                    m.d.sync += cnt.eq(0)
                    m.next = "RSQ"
            with m.State("RSQ"):
                m.d.sync += cnt.eq(cnt + 1)
                m.d.comb += rs_req.eq(Mux(cnt == 0, 1, Mux(cnt == 1, 2, 0)))
                with m.If(cnt == Rsqrt.LATENCY):
                    m.d.sync += [mant_k.eq(rsq.o_mant), sk_m1.eq(l2_c - rsq.o_e)]
                with m.If(cnt == Rsqrt.LATENCY + 1):
                    m.d.sync += [mant_q.eq(rsq.o_mant), sq_m1.eq(l2_c - rsq.o_e), cnt.eq(0), row.eq(0),
                                 pass2.eq(0)]
                    m.d.sync += [a.eq(0) for a in acc]
                    m.next = "ROWS"
            with m.State("ROWS"):
                m.d.comb += issue.eq(row < dh)
                with m.If(row < dh):
                    m.d.sync += row.eq(row + 1)
                with m.Else():
                    m.d.sync += cnt.eq(cnt + 1)
                    with m.If(cnt == 4):
                        m.d.sync += cnt.eq(0)
                        m.next = "NEXT"
            with m.State("NEXT"):
                with m.If(~pass2):
                    m.next = "U1"
                with m.Else():
                    m.d.sync += [rd[j].eq(_clip(_rs(acc[j], UNIT.frac), S)) for j in lanes]
                    m.d.sync += [ss_o.eq(0), cnt.eq(0)]
                    m.next = "SS"
            with m.State("U1"):
                m.d.sync += [u_l[j].eq(_clip((vl[j] << (S.frac - X.frac)) - _rs(acc[j], UNIT.frac), S)) for j in lanes]
                m.next = "U2"
            with m.State("U2"):
                m.d.sync += [bu_prod[j].eq(u_l[j] * beta[head]) for j in lanes]
                m.next = "U3"
            with m.State("U3"):
                m.d.sync += [bu[j].eq(_rs(bu_prod[j], P.frac)) for j in lanes]
                m.d.sync += [a.eq(0) for a in acc]
                m.d.sync += [pass2.eq(1), row.eq(0), cnt.eq(0)]
                m.next = "ROWS"
            with m.State("SS"):
                m.d.comb += ss_on.eq(cnt < dh)
                m.d.sync += cnt.eq(cnt + 1)
                with m.If(cnt == dh + 2):
                    m.d.sync += cnt.eq(0)
                    m.next = "RSQ_O"
            with m.State("RSQ_O"):
                m.d.comb += rs_req.eq(Mux(cnt == 0, 3, 0))
                m.d.sync += cnt.eq(cnt + 1)
                with m.If(cnt == Rsqrt.LATENCY):
                    m.d.sync += [mant_o.eq(rsq.o_mant), so_m1.eq(rn_c - rsq.o_e), ocol.eq(0), cnt.eq(0)]
                    m.next = "OUT"
            with m.State("OUT"):
                m.d.comb += [o_issue.eq(ocol < dh), last_head.eq(head == H - 1)]
                with m.If(adv & (ocol < dh)):
                    m.d.sync += ocol.eq(ocol + 1)
                with m.If(self.o.valid & self.o.ready):
                    m.d.sync += cnt.eq(cnt + 1)
                    with m.If(cnt == dh - 1):
                        m.d.sync += cnt.eq(0)
                        with m.If(head == H - 1):
                            m.d.comb += clear_ss.eq(1)
                            m.next = "INGEST"
                        with m.Else():
                            m.d.sync += head.eq(head + 1)
                            m.next = "RSQ"
        return m


# KDA dimensions per chip preset (hw.params.ChipParams.name); proposed for merging into ChipParams.
KDA_PRESETS: dict[str, KdaParams] = {
    "nano": KdaParams(heads=2, dh=32, conv_k=4, max_layers=2),
    "tiny": KdaParams(heads=1, dh=16, conv_k=4, max_layers=2),
}


def kda_params_for(chip) -> KdaParams:
    try:
        return KDA_PRESETS[chip.name]
    except KeyError:
        raise ValueError(f"no KDA dimensions for chip preset {chip.name!r}; known: {', '.join(KDA_PRESETS)}") from None


def kda_engine_block(chip) -> KdaEngine:
    return KdaEngine(kda_params_for(chip))


def kda_engine_derived(chip) -> dict:
    kp = kda_params_for(chip)
    return {"heads": kp.heads, "dh": kp.dh, "conv_k": kp.conv_k, "max_layers": kp.max_layers,
            "sel": {s.name: int(s) for s in Sel}, "rom_dir": "roms", "roms": ["sigmoid", "kda_decay", "rsqrt"]}
