"""The KDA engine: one position of a Kimi-Delta-Attention layer after its input projections.

Reference: ``nano_k3.fixed`` (``kda_conv``, ``fxp_math.l2norm``, ``kda_beta``, ``kda_alpha``,
``kda_state_update``, ``gated_norm``) composed as in ``FixedModel._kda``; formats are
``nano_k3.fxp_ops`` (docs/fixed_point.md), read at construction time, never repeated here.

Input ``i``: one transfer carries L = ``KdaParams.lanes`` (1 or 2) consecutive elements of one vector:
``sel`` says which vector, ``idx`` the index of the first element (a multiple of L), and every per-element
field is an array over the lanes, lane k = element idx + k:
  Q/K/V  pre-conv projections ``data[k]`` (X) with the channel's K conv taps ``taps[k K + j]`` (Q4.11,
         tap K-1 = current input); P / L transfers each
  B      beta logits ``data[k]`` of head idx + k (X); ceil(H / L) transfers, a lane beyond head H-1 is ignored
  F      decay inputs f ``data[k]`` (X) with ``a[k]`` = A of its head (UQ8.8) and ``dtb[k]`` of the channel
         (Q4.11); P / L transfers
  Z      output gates z ``data[k]`` (X) with ``w[k]`` = onorm.w[(idx + k) mod dh] (Q2.13); P / L transfers
Fields a transfer's vector does not use are ignored. The transfers of a position may come in any order:
the engine counts those of Q, K, V, B and F (``KdaParams.state_transfers``) and starts the state update
after the last of them, while Z's are still taken (the chip sends Q, K, V, B, F, then Z: the state update
never waits for Z; the output pipeline waits until every transfer of the position is in). ``last`` marks
the position's final transfer. ``layer`` (region of the state / history SRAMs) and ``restart`` (first
position of a sequence: the conv histories and the state read as zero, so SRAM contents at power-up never
matter) must be the same on every transfer of a position.

Output ``o``: the gated, head-concatenated vector (P elements of X, L a transfer, index order, ``last`` on
the final one): ``data[k]`` is element t L + k of transfer t, ``read[k]`` (for verification) the read-out
q_hat . S' (format S) of the same index.

Micro-architecture (dh columns, column j = state column j; state SRAM word = one state row). The table
functions are ``hw.lib.lut`` components: L ``Sigmoid`` (beta, sigmoid(z) and the SiLU of the conv
outputs, which multiplies x by it; lane k reads the sigmoid ROM through ``roms["sigmoid"][k]`` when the
chip passes it, else owns one), one L-lane ``kda_decay`` ``LutEval`` (the lanes on the two read ports of
one ROM: ``roms["kda_decay"]``, else its own), one ``Rsqrt`` (the 2H L2 norms and the H gated norms) and 2 + L ``ApplyMant`` (k_hat, q_hat and,
per output lane, the gated norm's read / rms). Row-buffer, gate and history SRAM words hold L consecutive
indices.
  ingest   element pipeline, one transfer a cycle (``i.ready`` = 1 until ``last``), per lane: conv window
           from the history SRAM, taps, Sigmoid / KdaDecay, SiLU multiply, into the row buffer SRAM (q, k,
           v, alpha per index) and the gate SRAM (sigmoid(z), w); running sums of q^2, k^2 per head.
  norms    after the last Q/K/V/B/F transfer: rsqrt of every head's sum of k^2 and q^2, back to back.
  rows     per head, one state row a cycle through one pipeline (8 stages): pass 1 decays S[i] by
           alpha[i], writes it back, accumulates kS += k_hat[i] S'[i] (k_hat, q_hat by ApplyMant, kept
           in the row buffer); u = v - kS, beta u on the column multipliers (a 7-cycle gap); pass 2
           S'' = S' + k_hat[i] beta u, written back, read += q_hat[i] S''[i]. The next head's pass 1
           follows pass 2 without a gap (the first row of a pass loads the accumulators).
  tail     per head, overlapping the next head's rows: read is copied into a register rotating by L,
           sum read^2 (L squarers, dh / L cycles), rsqrt, then the back-pressured output pipeline, L lanes
           (ApplyMant, gain, x sigmoid(z); one gate SRAM word a transfer), once Z is in. ``i.ready`` rises
           again after the last output.
Each column has two multipliers (33 x 25: S alpha, bu k_hat, u beta; 32 x 24: S' k_hat, S'' q_hat); every
multiply has a stage of its own, rounding shifts and saturation take the next one.

Latency (no idles, no back-pressure; ``KdaEngine.drain`` / ``z_drain``, measured by
verification/test_kda_engine.py ``kda_latency``): ingest takes one cycle per transfer; the last output
leaves at max(t_s + drain, t_z + z_drain), t_s the cycle of the last Q/K/V/B/F transfer, t_z that of the
position's last transfer. A head's rows take R = 2 dh + 7 cycles (two passes, the bu gap), its tail
T = 2 dh / L + 16 (1 takes read, dh / L + 2 sum read^2, 1 + 5 rsqrt, dh / L output transfers behind the
7-stage output pipeline). drain = 2 dh + 33 + (H - 1) max(R, T) + T - 1: 13 drain the ingest pipeline and
7 get head 0's rsqrts (first row at 20), 2 dh + 6 issue head 0's rows, 7 finish its last one, then each
further head's read is taken max(R, T) after the previous one (the tails set the pace at L=1, the rows at
L=2 once dh >= 16), the last output in the last tail's last cycle: nano (H=2, dh=32) 215 at L=2
(T=48 < R=71), 256 at L=1 (T=80); tiny (H=1, dh=16) 96 at L=2 (T=32), 112 at L=1 (T=48). z_drain (Z so
late that head 0's outputs wait for it) = 12 to the gate SRAM + dh / L + 6 for head 0's outputs
+ (H - 1) T: nano 82 at L=2, 130 at L=1; tiny 26 at L=2, 34 at L=1. A position in the chip's order, Z
right behind F: 4 P / L + ceil(H / L) cycles of state transfers, then drain (Z's P / L transfers overlap
it): nano 129 + 215 = 344 cycles at L=2, 258 + 256 = 514 at L=1 (322 + 256 = 578 when the rows waited for
Z); tiny 33 + 96 = 129 at L=2, 65 + 112 = 177 at L=1.
"""
from __future__ import annotations

import enum
import math
from dataclasses import dataclass

from amaranth.hdl import Array, Cat, ClockSignal, Const, Instance, Module, Mux, Signal, signed, unsigned
from amaranth.lib import stream, wiring
from amaranth.lib.data import ArrayLayout, StructLayout
from amaranth.lib.wiring import In, Out

from hw.lib.lut import ApplyMant, LutEval, Rsqrt, Sigmoid, decay_table_input
from hw.lib.lut_rom import port_of
from hw.lib.pipe import clamp, delay, round_shift_const
from hw.params import int_in, pow2_at_least, require_instance
from hw.roms import ROM_DIR
from nano_k3 import fxp_math
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



def _bytes(bits: int) -> int:
    return -(-bits // 8) * 8


@dataclass(frozen=True)
class KdaParams:
    """Dimensions of one KDA engine build (proposed for merging into hw.params.ChipParams)."""

    heads: int = 2
    dh: int = 32
    conv_k: int = 4
    max_layers: int = 2
    lanes: int = 1              # elements per input transfer (a LUT ROM has two read ports)

    def __post_init__(self) -> None:
        int_in("heads", self.heads, 1, 16)
        int_in("dh", self.dh, 2, 256)
        pow2_at_least("dh", self.dh, 2, "the RMS mean is a shift")
        int_in("conv_k", self.conv_k, 2, 8)
        int_in("max_layers", self.max_layers, 1, 64)
        int_in("lanes", self.lanes, 1, 2)

    @classmethod
    def for_model(cls, cfg, lanes: int) -> "KdaParams":
        """The chip's engine for model config ``cfg`` (a ``nano_k3.config.ModelConfig``): state and conv
        histories for its KDA layers, ``lanes`` input elements a transfer."""
        return cls(heads=cfg.kda_heads, dh=cfg.kda_dh, conv_k=cfg.conv_k, max_layers=max(1, cfg.n_kda_layers),
                   lanes=lanes)

    @property
    def width(self) -> int:
        return self.heads * self.dh

    @property
    def state_transfers(self) -> int:
        """Input transfers of Q, K, V, B and F in one position (the state update starts after the last)."""
        return 4 * self.width // self.lanes + -(-self.heads // self.lanes)

    @property
    def transfers(self) -> int:
        """Input transfers of one position (the state inputs and Z)."""
        return self.state_transfers + self.width // self.lanes


def in_layout(p: KdaParams) -> StructLayout:
    lanes = lambda shape: ArrayLayout(shape, p.lanes)      # noqa: E731  lane k = element idx + k
    return StructLayout({
        "sel": unsigned(3),
        "idx": unsigned(max(1, (p.width - 1).bit_length())),
        "data": lanes(signed(X.bits)),
        "taps": ArrayLayout(signed(PARAM_BITS), p.lanes * p.conv_k),     # lane k's at k conv_k + j
        "a": lanes(unsigned(PARAM_BITS)),
        "dtb": lanes(signed(PARAM_BITS)),
        "w": lanes(signed(PARAM_BITS)),
        "layer": unsigned(max(1, (p.max_layers - 1).bit_length())),
        "restart": unsigned(1),
        "last": unsigned(1),
    })


def out_layout(p: KdaParams) -> StructLayout:
    lanes = lambda shape: ArrayLayout(shape, p.lanes)      # noqa: E731  lane k = element index + k
    return StructLayout({"data": lanes(signed(X.bits)), "read": lanes(signed(S.bits)), "last": unsigned(1)})


def _is(v, const: int):
    """v == const, written as a reduction for 0 (yosys prints `x == 0` as `!x`, which Verilator flags)."""
    return ~v.any() if const == 0 else v == const


def _pack(*parts):
    """Concatenate (value, field width) pairs, LSB first: each value truncated or zero-padded to its field."""
    return Cat(*(Cat(v.as_unsigned()[:w], Const(0, max(0, w - len(v)))) for v, w in parts))


def _rsqrt_e_range(m_lo: int, m_hi: int, frac: int) -> tuple[int, int]:
    """Exponents fxp_math.rsqrt returns for every m in [m_lo, m_hi] at ``frac`` (ApplyMant's shift range)."""
    es = [-((lead - frac - ((lead - frac) & 1)) >> 1) for lead in range(m_lo.bit_length() - 1, m_hi.bit_length())]
    return min(es), max(es)


class KdaEngine(wiring.Component):
    """KDA token mixer core for one position (see the module docstring)."""

    # ingest stages: E1 window, E2 conv products, E3 conv sum / (f + dtb) A, E4 x in X, Sigmoid,
    # E9 table outputs, E10 SiLU product, E11 SiLU in X (SRAM writes), E12 square, E13 sums of squares
    E_SIG = 4
    E_TAB = E_SIG + Sigmoid.LATENCY
    E_WRITE = E_TAB + 2
    E_SUMS = E_WRITE + 2
    # row pipeline stages (row issued at stage 0): 1 SRAM words, 2 column product A, 3 rounded row (state
    # write-back), 4 k_hat / q_hat (buffer write), 5 column product B, 6 accumulators, 7 u / read captured
    R_HAT = 1 + ApplyMant.LATENCY
    R_ACC = R_HAT + 2
    BU_GAP = R_ACC + 2          # cycles from the last pass-1 row to the first pass-2 row (bu ready)
    # output pipeline: ApplyMant, gain product, rounded, x sigmoid(z), output register
    O_LAT = ApplyMant.LATENCY + 4

    @classmethod
    def tail_cycles(cls, p: KdaParams) -> int:
        """Cycles a head's tail holds the tail unit: take read, sum read^2 (dh / L + 2), the rsqrt request
        register and Rsqrt, dh / L issues, the output pipeline (its last output leaves in the last cycle)."""
        return 1 + (p.dh // p.lanes + 2) + (1 + Rsqrt.LATENCY) + p.dh // p.lanes + cls.O_LAT

    @classmethod
    def head_rows(cls, p: KdaParams) -> int:
        """Cycles between the first rows of consecutive heads: two passes of dh rows and the bu gap."""
        return 2 * p.dh + cls.BU_GAP - 1

    @classmethod
    def drain(cls, p: KdaParams) -> int:
        """Cycles from the last Q/K/V/B/F transfer to the last output transfer (no back-pressure, Z in by then).

        The rows start E_SUMS + Rsqrt.LATENCY + 2 cycles after it (sums complete, head 0's rsqrts); head 0's
        last pass-2 row follows head_rows - 1 later, its read R_ACC + 1 later; each further head's read is
        taken one head_rows or one tail later, whichever is longer (a read waits for the tail; a tail, for
        its head's rows); the last output leaves in the last tail's last cycle."""
        first_row = cls.E_SUMS + Rsqrt.LATENCY + 2
        head0_read = first_row + cls.head_rows(p) - 1 + cls.R_ACC + 1
        tail = cls.tail_cycles(p)
        return head0_read + (p.heads - 1) * max(cls.head_rows(p), tail) + tail - 1

    @classmethod
    def z_drain(cls, p: KdaParams) -> int:
        """Cycles from the position's last transfer to the last output transfer when it comes so late that
        head 0's outputs wait for it: E_WRITE + 1 to the gate SRAM, head 0's dh / L output transfers, the
        other tails (their reads are in by then)."""
        return cls.E_WRITE + 1 + p.dh // p.lanes - 1 + cls.O_LAT + (p.heads - 1) * cls.tail_cycles(p)

    def __init__(self, params: KdaParams, *, rom_dir: str = ROM_DIR, roms=None):
        """``roms``: shared-ROM ports by table name (``hw.lib.lut_rom.shared_rom``), else each LUT owns its ROM;
        lane k's Sigmoid takes ``roms["sigmoid"][k]``, the decay table's lane k ``roms["kda_decay"][k]``."""
        require_instance(self, params, KdaParams)
        if S.frac < X.frac:
            self._MustUse__silence = True
            raise ValueError(f"S.frac={S.frac} < X.frac={X.frac}: v cannot be aligned to S by a left shift")
        self.params = p = params
        self.rom_dir, self.roms = rom_dir, roms
        dh = p.dh
        self.lg_dh = lg = dh.bit_length() - 1
        # sums of squares are exact, then rounded once to SQ_FRAC (fxp_math.sum_squares), plus eps
        self.l2_bits, self.rn_bits = 2 * X.bits + lg, 2 * S.bits + lg
        self.l2_sq_shift, self.rn_sq_shift = 2 * X.frac - SQ_FRAC, 2 * S.frac - SQ_FRAC
        self.l2_eps = fxp_math.eps_int(L2_EPS, SQ_FRAC)
        self.rn_eps = fxp_math.eps_int(RMS_EPS * dh * dh, SQ_FRAC)     # gated_norm's eps * dh, times n = dh (rmsnorm)
        self.l2_frac, self.rn_frac = SQ_FRAC, SQ_FRAC + lg
        l2_hi = round_shift_const(dh << (2 * X.bits - 2), self.l2_sq_shift) + self.l2_eps
        rn_hi = round_shift_const(dh << (2 * S.bits - 2), self.rn_sq_shift) + self.rn_eps
        self.rsqrt = Rsqrt(m_bits=max(l2_hi, rn_hi).bit_length(), frac_bits=max(self.l2_frac, self.rn_frac).bit_length(),
                           rom_dir=rom_dir, port=port_of(roms, "rsqrt"))
        self.y_bits = X.frac + math.ceil(lg / 2) + 2                    # read / rms <= sqrt(dh), plus margin
        self.apply_k, self.apply_q = (
            ApplyMant(v_bits=X.bits, v_frac=X.frac, out_frac=UNIT.frac, out_bits=UNIT.bits,
                      e_range=_rsqrt_e_range(self.l2_eps, l2_hi, self.l2_frac)) for _ in range(2))
        self.apply_o = [ApplyMant(v_bits=S.bits, v_frac=S.frac, out_frac=X.frac, out_bits=self.y_bits,
                                  e_range=_rsqrt_e_range(self.rn_eps, rn_hi, self.rn_frac)) for _ in range(p.lanes)]
        super().__init__({
            "i": In(stream.Signature(in_layout(p))),
            "o": Out(stream.Signature(out_layout(p))),
        })

    def elaborate(self, platform):
        m = Module()
        p = self.params
        H, dh, K, Pw, L = p.heads, p.dh, p.conv_k, p.width, p.lanes
        lg_l = L.bit_length() - 1
        lane_of = lambda i: i[0] if L == 2 else Const(0, 1)    # noqa: E731  lane of index i in its SRAM word
        ip = self.i.payload
        one = Const(1, 1)
        hbits = max(1, (H - 1).bit_length())

        # ---- storage (SPEC §5: every array is an msh_sram) ----------------------------------------
        def sram(name, depth, width):
            depth = max(2, depth)
            aw = (depth - 1).bit_length()
            ports = {n: Signal(w, name=f"{name}_{n}") for n, w in (
                ("we", 1), ("waddr", aw), ("wdata", width), ("wstrb", width // 8), ("re", 1), ("raddr", aw),
                ("rdata", width))}
            m.submodules[name] = Instance(
                "msh_sram", p_DEPTH=depth, p_WIDTH=width, p_ADDRW=aw, i_clk=ClockSignal(),
                i_we=ports["we"], i_waddr=ports["waddr"], i_wdata=ports["wdata"], i_wstrb=ports["wstrb"],
                i_re=ports["re"], i_raddr=ports["raddr"], o_rdata=ports["rdata"])
            return ports

        def fields(spec):
            off, o = {}, 0
            for name, w in spec.items():
                off[name] = (o, w)
                o += w
            return off, o

        def strb(off, *names):
            return sum(1 << b for n in names for b in range(off[n][0] // 8, (off[n][0] + off[n][1]) // 8))

        def field(word, off, name, bits, sgn=True):
            v = word[off[name][0]:off[name][0] + bits]
            return v.as_signed() if sgn else v

        # row buffer and gate SRAM words hold the L indices of one transfer, lane k at bits [k w, (k + 1) w)
        st_w = _bytes(dh * S.bits)
        hi_w = _bytes(L * (K - 1) * X.bits)
        fq = _bytes(max(X.bits, UNIT.bits))
        bf_off, bf_w = fields({"q": fq, "k": fq, "v": _bytes(X.bits), "alpha": _bytes(ALPHA.bits)})
        gt_off, gt_w = fields({"sigz": _bytes(P.bits), "w": PARAM_BITS})
        st = sram("kda_state_sram", p.max_layers * H * dh, st_w)          # state rows
        hs = sram("kda_hist_sram", p.max_layers * 3 * Pw // L, hi_w)      # conv histories (K-1 inputs)
        bf = sram("kda_buf_sram", Pw // L, L * bf_w)                      # q, k (then q_hat, k_hat), v, alpha
        gt = sram("kda_gate_sram", Pw // L, L * gt_w)                     # sigmoid(z), w (output pipeline)

        def every_lane(mask: int, w: int) -> int:
            """A byte-strobe mask of one lane's field, repeated in every lane of a w-bit-per-lane word."""
            return sum(mask << (k * w // 8) for k in range(L))

        # ---- shared units -----------------------------------------------------------------------
        sig = [Sigmoid(rom_dir=self.rom_dir, port=port_of(self.roms, "sigmoid", k)) for k in range(L)]
        for k in range(L):
            m.submodules[f"sigmoid{k}"] = sig[k]
        # KdaDecay (its front end ``decay_table_input``) on L lanes of one LutEval: its lanes read the two
        # ports of one kda_decay ROM (its own, or the one ``roms["kda_decay"]`` names)
        dec_ports = tuple(port_of(self.roms, "kda_decay", k) for k in range(L))
        m.submodules.decay = dec = LutEval("kda_decay", lanes=L, rom_dir=self.rom_dir,
                                           port=dec_ports if all(dec_ports) else None)
        m.submodules.rsqrt = rsq = self.rsqrt
        m.submodules.apply_k = apk = self.apply_k
        m.submodules.apply_q = apq = self.apply_q
        for k, apo in enumerate(self.apply_o):
            m.submodules[f"apply_o{k}"] = apo

        # ---- control state ---------------------------------------------------------------------
        # Two controllers, each a state register with one If per state (codes from 1: no `== 0`).
        ISSUE = {n: k + 1 for k, n in enumerate(("INGEST", "DRAIN", "P1", "BU", "P2", "FINISH"))}
        TAIL = {n: k + 1 for k, n in enumerate(("IDLE", "SS", "RSQ", "OUT"))}
        state = Signal(range(len(ISSUE) + 1), init=ISSUE["INGEST"])
        tstate = Signal(range(len(TAIL) + 1), init=TAIL["IDLE"])
        layer = Signal.like(ip.layer)
        restart = Signal()
        cnt = Signal(range(max(dh, self.E_SUMS + Rsqrt.LATENCY, self.BU_GAP) + 2))
        row = Signal(range(dh))
        head = Signal(range(max(2, H)))
        beta = Array(Signal(P.bits, name=f"beta_{h}") for h in range(H))
        ssq = Array(Signal(self.l2_bits, name=f"ssq_{h}") for h in range(H))
        ssk = Array(Signal(self.l2_bits, name=f"ssk_{h}") for h in range(H))
        mant_k, mant_q = (Array(Signal(len(rsq.o.mant), name=f"mant_{n}{h}") for h in range(H)) for n in "kq")
        e_k, e_q = (Array(Signal(rsq.o.e.shape(), name=f"e_{n}{h}") for h in range(H)) for n in "kq")
        mant_o, e_o = Signal.like(rsq.o.mant, name="mant_o"), Signal.like(rsq.o.e, name="e_o")
        pos_done = Signal()
        take = Signal()
        accept = Signal(init=1)             # the position's last transfer is not yet taken
        n_state = Signal(range(p.state_transfers))      # Q, K, V, B, F transfers taken
        in_done = Signal()                  # every transfer of the position is in the SRAMs (Z for the outputs)
        m.d.comb += [self.i.ready.eq(accept), take.eq(self.i.valid & accept)]

        # ---- ingest pipeline (never stalls) ------------------------------------------------------
        hist_addr = Signal.like(hs["raddr"])
        m.d.comb += [hist_addr.eq((ip.layer * 3 + Mux(ip.sel > Sel.V, 0, ip.sel)) * (Pw // L) + ip.idx[lg_l:]),
                     hs["re"].eq(take), hs["raddr"].eq(hist_addr)]
        e1v, e1, e1a = Signal(), Signal(in_layout(p)), Signal.like(hist_addr)
        m.d.sync += [e1v.eq(take), e1.eq(ip), e1a.eq(hist_addr)]
        hword = Signal(hi_w)
        m.d.comb += hword.eq(Mux(e1.restart, 0, hs["rdata"]))
        # side band of a transfer from E1 to the SRAM writes
        sb_layout = StructLayout({"v": 1, "sel": unsigned(3), "idx": len(ip.idx),
                                  "w": ArrayLayout(signed(PARAM_BITS), L), "last": 1})
        sb1 = Signal(sb_layout)
        m.d.comb += [sb1.v.eq(e1v), sb1.sel.eq(e1.sel), sb1.idx.eq(e1.idx), sb1.w.eq(e1.w), sb1.last.eq(e1.last)]
        sb3 = delay(m, one, sb1, 2, "sb")
        sb4 = delay(m, one, sb3, 1, "sb3")
        sb9 = delay(m, one, sb4, Sigmoid.LATENCY, "sb4")
        sb11 = delay(m, one, sb9, 2, "sb9")
        dt = dec.lut

        def ingest_lane(k):
            """E1 .. E11 of lane k: returns its history window (K inputs), SiLU(conv) and table output."""
            window = [hword.word_select(k * (K - 1) + j, X.bits).as_signed() for j in range(K - 1)] + [e1.data[k]]
            # E2: conv products, f + dtb in X
            prod_w = X.bits + PARAM_BITS
            e2p = [Signal(signed(prod_w), name=f"conv_p{j}_{k}") for j in range(K)]
            e2fx, e2a = Signal(signed(X.bits + 2), name=f"fx2_{k}"), Signal(unsigned(PARAM_BITS), name=f"a2_{k}")
            e2d = Signal(signed(X.bits), name=f"d2_{k}")
            m.d.sync += [*(e2p[j].eq(window[j] * e1.taps[k * K + j]) for j in range(K)),
                         e2fx.eq(e1.data[k] + (e1.dtb[k] << (X.frac - TAP_FRAC))), e2a.eq(e1.a[k]), e2d.eq(e1.data[k])]
            # E3: conv sum; (f + dtb) A
            e3sum = Signal(signed(prod_w + K.bit_length()), name=f"conv_sum3_{k}")
            e3g = Signal(signed(X.bits + 3 + PARAM_BITS), name=f"g3_{k}")
            e3d = Signal(signed(X.bits), name=f"d3_{k}")
            m.d.sync += [e3sum.eq(sum(e2p[1:], e2p[0])), e3g.eq(e2fx * e2a), e3d.eq(e2d)]
            # E4: into X: conv -> X.fit(frac + TAP_FRAC), F -> X.fit(frac + A_FRAC), B and Z as they are
            x4 = Signal(signed(X.bits), name=f"x4_{k}")
            m.d.sync += x4.eq(Mux(sb3.sel <= Sel.V, clamp(round_shift_const(e3sum, TAP_FRAC), X.lo, X.hi),
                                  Mux(sb3.sel == Sel.F, clamp(round_shift_const(e3g, A_FRAC), X.lo, X.hi), e3d)))
            # E4 -> E9: sigmoid(x); kda_decay(x) one cycle later (E5 clamp, E6 table index), so both land at E9
            u5 = Signal(dt.index_bits + dt.interp_bits, name=f"decay_u5_{k}")
            m.d.comb += [sig[k].i.x.eq(x4), sig[k].i_valid.eq(sb4.v),
                         u5.eq(decay_table_input(delay(m, one, x4, 1, f"xg_{k}")))]
            m.d.sync += [dec.i[k].idx.eq(u5[dt.interp_bits:]), dec.i[k].r.eq(u5[:dt.interp_bits])]
            x9 = delay(m, one, x4, Sigmoid.LATENCY, f"xs_{k}")
            # E10: SiLU product; table output by selector. E11: SiLU rounded to X
            silu10 = Signal(signed(X.bits + P.bits + 1), name=f"silu10_{k}")
            y10 = Signal(P.bits, name=f"y10_{k}")
            m.d.sync += [silu10.eq(x9 * sig[k].o.y), y10.eq(Mux(sb9.sel == Sel.F, dec.o[k], sig[k].o.y))]
            c11 = Signal(signed(X.bits), name=f"c11_{k}")
            m.d.sync += c11.eq(clamp(round_shift_const(silu10, P.frac), X.lo, X.hi))
            return window, c11, delay(m, one, y10, 1, f"y10_{k}")

        windows, c11, y11 = zip(*(ingest_lane(k) for k in range(L)))
        m.d.comb += [hs["we"].eq(e1v & (e1.sel <= Sel.V)), hs["waddr"].eq(e1a),
                     hs["wdata"].eq(_pack(*((w, X.bits) for win in windows for w in win[1:]))),
                     hs["wstrb"].eq((1 << (hi_w // 8)) - 1)]
        # E11: SRAM / register writes
        bword, gword = Signal(L * bf_w), Signal(L * gt_w)
        m.d.comb += [bword.eq(Cat(*(_pack((c11[k], fq), (c11[k], fq), (c11[k], _bytes(X.bits)),
                                          (y11[k], _bytes(ALPHA.bits))) for k in range(L)))),
                     gword.eq(Cat(*(_pack((y11[k], _bytes(P.bits)), (sb11.w[k], PARAM_BITS)) for k in range(L))))]
        ing_we = sb11.v & ((sb11.sel <= Sel.V) | (sb11.sel == Sel.F))
        ing_strb = Mux(_is(sb11.sel, Sel.Q), every_lane(strb(bf_off, "q"), bf_w),
                       Mux(sb11.sel == Sel.K, every_lane(strb(bf_off, "k"), bf_w),
                           Mux(sb11.sel == Sel.V, every_lane(strb(bf_off, "v"), bf_w),
                               every_lane(strb(bf_off, "alpha"), bf_w))))
        for k in range(L):
            with m.If(sb11.v & (sb11.sel == Sel.B) & (sb11.idx + k < H)):
                m.d.sync += beta[sb11.idx + k].eq(y11[k])
        m.d.comb += [gt["we"].eq(sb11.v & (sb11.sel == Sel.Z)), gt["waddr"].eq(sb11.idx[lg_l:]), gt["wdata"].eq(gword),
                     gt["wstrb"].eq((1 << (L * gt_w // 8)) - 1)]
        with m.If(sb11.v & sb11.last):
            m.d.sync += in_done.eq(1)
        # E12: squares for the L2 norms; E13: per-head sums (the lanes of a transfer are in one head)
        sq12 = [Signal(unsigned(2 * X.bits), name=f"sq12_{k}") for k in range(L)]
        m.d.sync += [sq12[k].eq(c11[k] * c11[k]) for k in range(L)]
        sb12 = delay(m, one, sb11, 1, "sb11")
        h12 = sb12.idx >> self.lg_dh
        clear_ss = Signal()
        with m.If(clear_ss):
            m.d.sync += [s.eq(0) for s in (*ssq, *ssk)]
        with m.Elif(sb12.v & _is(sb12.sel, Sel.Q)):
            m.d.sync += ssq[h12].eq(ssq[h12] + sum(sq12))
        with m.Elif(sb12.v & (sb12.sel == Sel.K)):
            m.d.sync += ssk[h12].eq(ssk[h12] + sum(sq12))

        # ---- rsqrt requests: 2H L2 norms after the drain (tag 2h: k of head h, 2h + 1: q), then the tails' --
        l2_rq = Signal(range(2 * H + 1), init=2 * H)          # next L2 request; 2H = none pending
        tail_rq = Signal()
        rq_m, rq_frac = Signal.like(rsq.i.m), Signal.like(rsq.i.frac)
        rq_v, rq_tag = Signal(), Signal(range(2 * H + 1))      # tag 2H: the tail's gated norm
        l2_ss = Mux(l2_rq[0], ssq[l2_rq >> 1], ssk[l2_rq >> 1])
        ss_o = Signal(self.rn_bits)
        m.d.sync += [rq_v.eq((l2_rq < 2 * H) | tail_rq), rq_tag.eq(Mux(l2_rq < 2 * H, l2_rq, 2 * H)),
                     rq_m.eq(Mux(l2_rq < 2 * H, round_shift_const(l2_ss, self.l2_sq_shift) + self.l2_eps,
                                 round_shift_const(ss_o, self.rn_sq_shift) + self.rn_eps)),
                     rq_frac.eq(Mux(l2_rq < 2 * H, self.l2_frac, self.rn_frac))]
        with m.If(l2_rq < 2 * H):
            m.d.sync += l2_rq.eq(l2_rq + 1)
        m.d.comb += [rsq.i_valid.eq(rq_v), rsq.i.m.eq(rq_m), rsq.i.frac.eq(rq_frac)]
        rs_tag = delay(m, one, rq_tag, Rsqrt.LATENCY, "rsq_tag")
        rsqrt_o = Signal()                                     # the tail's result is on rsq.o
        with m.If(rsq.o_valid):
            with m.If(rs_tag == 2 * H):
                m.d.comb += rsqrt_o.eq(1)
                m.d.sync += [mant_o.eq(rsq.o.mant), e_o.eq(rsq.o.e)]
            with m.Elif(rs_tag[0]):
                m.d.sync += [mant_q[rs_tag >> 1].eq(rsq.o.mant), e_q[rs_tag >> 1].eq(rsq.o.e)]
            with m.Else():
                m.d.sync += [mant_k[rs_tag >> 1].eq(rsq.o.mant), e_k[rs_tag >> 1].eq(rsq.o.e)]

        # ---- row pipeline ------------------------------------------------------------------------
        ctl_layout = StructLayout({"v": 1, "p2": 1, "first": 1, "last": 1, "row": range(dh), "head": range(max(2, H))})
        ctl = [Signal(ctl_layout, name=f"row{k}") for k in range(self.R_ACC + 2)]
        m.d.sync += [ctl[k].eq(ctl[k - 1]) for k in range(1, len(ctl))]
        st_base = lambda c: layer * (H * dh) + c.head * dh                 # noqa: E731
        # row buffer word of a row (index head dh + row)
        bf_addr = lambda c: Cat(c.row[lg_l:], c.head[:hbits]) if H > 1 else c.row[lg_l:]  # noqa: E731
        m.d.comb += [st["re"].eq(ctl[0].v), st["raddr"].eq(st_base(ctl[0]) + ctl[0].row),
                     bf["re"].eq(ctl[0].v), bf["raddr"].eq(bf_addr(ctl[0]))]
        c1 = ctl[1]
        cols = range(dh)
        srow = [Mux(restart & ~c1.p2, 0, st["rdata"][j * S.bits:(j + 1) * S.bits].as_signed()) for j in cols]
        bword1 = bf["rdata"].word_select(lane_of(c1.row), bf_w)
        b_q, b_k = field(bword1, bf_off, "q", X.bits), field(bword1, bf_off, "k", X.bits)
        b_qhat, b_khat = field(bword1, bf_off, "q", UNIT.bits), field(bword1, bf_off, "k", UNIT.bits)
        b_v = field(bword1, bf_off, "v", X.bits)
        b_alpha = field(bword1, bf_off, "alpha", ALPHA.bits, sgn=False)
        # stage 1 -> 4: k_hat, q_hat (pass 1)
        m.d.comb += [apk.i_valid.eq(c1.v & ~c1.p2), apk.i.v.eq(b_k), apk.i.mant.eq(mant_k[c1.head]),
                     apk.i.e.eq(e_k[c1.head]),
                     apq.i_valid.eq(c1.v & ~c1.p2), apq.i.v.eq(b_q), apq.i.mant.eq(mant_q[c1.head]),
                     apq.i.e.eq(e_q[c1.head])]
        vl = Array(Signal(signed(X.bits), name=f"v_{j}") for j in cols)
        with m.If(c1.v & ~c1.p2):
            m.d.sync += vl[c1.row].eq(b_v)
        # lane product A (stage 2): S alpha (pass 1), bu k_hat (pass 2), u beta (between the passes)
        u_l = [Signal(signed(S.bits), name=f"u_{j}") for j in cols]
        bu = [Signal(signed(S.bits + 1), name=f"bu_{j}") for j in cols]
        pa_b_bits = max(ALPHA.bits, P.bits, UNIT.bits - 1) + 1
        pa = [Signal(signed(S.bits + 1 + pa_b_bits), name=f"pa_{j}") for j in cols]
        u_hold, bu_hold = Signal(), Signal()                 # u_l holds / pa holds u beta
        u_head = Signal.like(head)
        for j in cols:
            a_op = Mux(u_hold, u_l[j], Mux(c1.p2, bu[j], srow[j]))
            b_op = Signal(signed(pa_b_bits), name=f"pa_b_{j}") if j == 0 else b_op
            if j == 0:
                m.d.comb += b_op.eq(Mux(u_hold, beta[u_head], Mux(c1.p2, b_khat, b_alpha)))
            m.d.sync += pa[j].eq(a_op * b_op)
        srow2 = [Signal(signed(S.bits), name=f"srow2_{j}") for j in cols]
        m.d.sync += [srow2[j].eq(srow[j]) for j in cols]
        qhat = delay(m, one, b_qhat, self.R_HAT - 1, "qhat")   # stage 4 (pass 2)
        # stage 3: S' = round(S alpha) (pass 1) or S'' = sat(S' + round(k_hat bu)) (pass 2); written back
        c2, c3, c4, c5 = ctl[2], ctl[3], ctl[4], ctl[5]
        s3 = [Signal(signed(S.bits), name=f"srow3_{j}") for j in cols]
        m.d.sync += [s3[j].eq(Mux(c2.p2, clamp(srow2[j] + round_shift_const(pa[j], UNIT.frac), S.lo, S.hi),
                                  round_shift_const(pa[j], ALPHA.frac))) for j in cols]
        with m.If(bu_hold):
            m.d.sync += [bu[j].eq(round_shift_const(pa[j], P.frac)) for j in cols]
        m.d.comb += [st["we"].eq(c3.v), st["waddr"].eq(st_base(c3) + c3.row), st["wdata"].eq(Cat(*s3)),
                     st["wstrb"].eq((1 << (st_w // 8)) - 1)]
        s4 = [delay(m, one, s3[j], 1, f"srow4_{j}") for j in cols]
        # stage 4: k_hat / q_hat into the row buffer (pass 1); stage 5: lane product B
        hats4 = _pack((apq.o.y, fq), (apk.o.y, fq))
        hats4_strb = Const(strb(bf_off, "q", "k"), L * bf_w // 8) << (lane_of(c4.row) * (bf_w // 8))
        m.d.comb += [bf["we"].eq(Mux(c4.v & ~c4.p2, 1, ing_we)),
                     bf["waddr"].eq(Mux(c4.v & ~c4.p2, bf_addr(c4), sb11.idx[lg_l:])),
                     bf["wdata"].eq(Mux(c4.v & ~c4.p2, _pack(*((hats4, bf_w) for _ in range(L))), bword)),
                     bf["wstrb"].eq(Mux(c4.v & ~c4.p2, hats4_strb, ing_strb))]
        pb_w = S.bits + UNIT.bits
        pb = [Signal(signed(pb_w), name=f"pb_{j}") for j in cols]
        hat4 = Mux(c4.p2, qhat, apk.o.y)
        m.d.sync += [pb[j].eq(s4[j] * hat4) for j in cols]
        # stage 6: accumulators (the first row of a pass loads them)
        acc = [Signal(signed(pb_w + self.lg_dh + 1), name=f"acc_{j}") for j in cols]
        with m.If(c5.v):
            m.d.sync += [acc[j].eq(Mux(c5.first, pb[j], acc[j] + pb[j])) for j in cols]
        # stage 6 of a pass's last row: u = sat(v - kS) (pass 1) or read = sat(q_hat . S'') (pass 2)
        c6 = ctl[6]
        rd = [Signal(signed(S.bits), name=f"read_{j}") for j in cols]
        rd_full, rd_head = Signal(), Signal.like(head)
        m.d.sync += [u_hold.eq(c6.v & c6.last & ~c6.p2), bu_hold.eq(u_hold), u_head.eq(c6.head)]
        with m.If(c6.v & c6.last & ~c6.p2):
            m.d.sync += [u_l[j].eq(clamp((vl[j] << (S.frac - X.frac)) - round_shift_const(acc[j], UNIT.frac),
                                         S.lo, S.hi)) for j in cols]
        with m.If(c6.v & c6.last & c6.p2):
            m.d.sync += [rd[j].eq(clamp(round_shift_const(acc[j], UNIT.frac), S.lo, S.hi)) for j in cols]
            m.d.sync += [rd_full.eq(1), rd_head.eq(c6.head)]

        # ---- row issue -------------------------------------------------------------------------
        first = Signal()
        last_head = (head == H - 1) if H > 1 else one
        m.d.comb += [ctl[0].row.eq(row), ctl[0].head.eq(head), ctl[0].first.eq(first), ctl[0].last.eq(row == dh - 1)]
        with m.If(take & ip.last):
            m.d.sync += accept.eq(0)
        with m.If(state == ISSUE["INGEST"]):
            with m.If(take & (ip.sel != Sel.Z)):
                m.d.sync += [layer.eq(ip.layer), restart.eq(ip.restart), n_state.eq(n_state + 1)]
                with m.If(n_state == p.state_transfers - 1):
                    m.d.sync += [state.eq(ISSUE["DRAIN"]), cnt.eq(0), n_state.eq(0)]
        with m.If(state == ISSUE["DRAIN"]):
            # the sums of squares are complete E_SUMS cycles after the last Q/K/V/B/F transfer; head 0's two
            # rsqrt results Rsqrt.LATENCY + 2 cycles after that (k_hat needs them at row stage 1)
            m.d.sync += cnt.eq(cnt + 1)
            with m.If(cnt == self.E_SUMS - 2):
                m.d.sync += l2_rq.eq(0)
            with m.If(cnt == self.E_SUMS + Rsqrt.LATENCY):
                m.d.sync += [state.eq(ISSUE["P1"]), row.eq(0), head.eq(0), first.eq(1)]
        for name, nxt in (("P1", "BU"), ("P2", None)):
            with m.If(state == ISSUE[name]):
                m.d.comb += [ctl[0].v.eq(1), ctl[0].p2.eq(name == "P2")]
                m.d.sync += [row.eq(row + 1), first.eq(0)]
                with m.If(row == dh - 1):
                    m.d.sync += [row.eq(0), first.eq(1), cnt.eq(0)]
                    if nxt:
                        m.d.sync += state.eq(ISSUE[nxt])
                    else:
                        with m.If(last_head):
                            m.d.sync += state.eq(ISSUE["FINISH"])
                        with m.Else():
                            m.d.sync += [head.eq(head + 1), state.eq(ISSUE["P1"])]
        with m.If(state == ISSUE["BU"]):
            # bu lands BU_GAP cycles after the last pass-1 row; read (captured at the end of pass 2)
            # must have been taken over by the tail
            m.d.sync += cnt.eq(cnt + 1)
            with m.If((cnt >= self.BU_GAP - 2) & ~rd_full):
                m.d.sync += state.eq(ISSUE["P2"])
        with m.If(state == ISSUE["FINISH"]):
            with m.If(pos_done):
                m.d.comb += clear_ss.eq(1)
                m.d.sync += [state.eq(ISSUE["INGEST"]), head.eq(0), accept.eq(1), in_done.eq(0)]

        # ---- tail: sum read^2 (L squarers), rsqrt, gated output pipeline (L lanes) -----------------------
        ordr = [Signal(signed(S.bits), name=f"oread_{j}") for j in cols]   # rotates by L per use; lane k: ordr[k]
        rotate = Signal()
        with m.If(rotate):
            m.d.sync += [ordr[j].eq(ordr[(j + L) % dh]) for j in cols]
        t_head = Signal.like(head)
        tcnt = Signal(range(dh // L + 2))
        sq_v = Signal()
        sq = [Signal(unsigned(2 * S.bits), name=f"osq_{k}") for k in range(L)]
        m.d.sync += [sq_v.eq(0), *(sq[k].eq(ordr[k] * ordr[k]) for k in range(L))]
        with m.If(sq_v):
            m.d.sync += ss_o.eq(ss_o + sum(sq))
        adv = Signal()
        m.d.comb += adv.eq(~self.o.valid | self.o.ready)
        ocol = Signal(range(dh + 1))                           # index of lane 0 of the next output transfer
        o_issue = Signal()
        o_end = Signal()                                       # the output register holds a head's last elements
        with m.If(tstate == TAIL["IDLE"]):
            with m.If(rd_full):
                m.d.sync += [*(ordr[j].eq(rd[j]) for j in cols), t_head.eq(rd_head), rd_full.eq(0),
                             tcnt.eq(0), ss_o.eq(0), tstate.eq(TAIL["SS"])]
        with m.If(tstate == TAIL["SS"]):
            m.d.sync += tcnt.eq(tcnt + 1)
            with m.If(tcnt < dh // L):
                m.d.comb += rotate.eq(1)
                m.d.sync += sq_v.eq(1)
            with m.If(tcnt == dh // L + 1):
                m.d.comb += tail_rq.eq(1)
                m.d.sync += tstate.eq(TAIL["RSQ"])
        with m.If(tstate == TAIL["RSQ"]):
            with m.If(rsqrt_o):
                m.d.sync += [tstate.eq(TAIL["OUT"]), ocol.eq(0)]
        with m.If(tstate == TAIL["OUT"]):
            m.d.comb += o_issue.eq((ocol < dh) & in_done)
            with m.If(o_issue & adv):
                m.d.comb += rotate.eq(1)
                m.d.sync += ocol.eq(ocol + L)
            with m.If(self.o.valid & self.o.ready & o_end):
                m.d.sync += tstate.eq(TAIL["IDLE"])
                m.d.comb += pos_done.eq((t_head == H - 1) if H > 1 else 1)
        # O0 issue (gate SRAM read: one word, the L indices of the transfer; ApplyMant inputs) | O1..O3
        # ApplyMant | O4 gain product | O5 rounded to X | O6 x sigmoid(z) | O7 output register; per lane,
        # every stage holds while the output register is full
        gaddr = Cat(ocol[lg_l:self.lg_dh], t_head[:hbits]) if H > 1 else ocol[lg_l:self.lg_dh]
        m.d.comb += [gt["re"].eq(o_issue & adv), gt["raddr"].eq(gaddr)]
        osb_layout = StructLayout({"read": ArrayLayout(signed(S.bits), L), "end": 1, "last": 1})
        osb0 = Signal(osb_layout)
        m.d.comb += [osb0.read.eq(Cat(*ordr[:L])), osb0.end.eq(ocol == dh - L),
                     osb0.last.eq((ocol == dh - L) & ((t_head == H - 1) if H > 1 else 1))]
        osb3 = delay(m, adv, osb0, ApplyMant.LATENCY, "osb")
        gword3 = delay(m, adv, gt["rdata"], ApplyMant.LATENCY - 1, "gate")
        for k, apo in enumerate(self.apply_o):
            m.d.comb += [apo.en.eq(adv), apo.i_valid.eq(o_issue), apo.i.v.eq(ordr[k]), apo.i.mant.eq(mant_o),
                         apo.i.e.eq(e_o)]
            glane3 = gword3.word_select(k, gt_w)
            sigz3, w3 = field(glane3, gt_off, "sigz", P.bits, sgn=False), field(glane3, gt_off, "w", PARAM_BITS)
            g4 = Signal(signed(self.y_bits + PARAM_BITS + 2), name=f"g4_{k}")
            x5 = Signal(signed(X.bits), name=f"x5_{k}")
            p6 = Signal(signed(X.bits + P.bits + 1), name=f"p6_{k}")
            sigz5 = delay(m, adv, sigz3, 2, f"sigz_{k}")
            with m.If(adv):
                m.d.sync += [g4.eq(apo.o.y * ((1 << W_FRAC) + w3)),
                             x5.eq(clamp(round_shift_const(g4, W_FRAC), X.lo, X.hi)),
                             p6.eq(x5 * sigz5),
                             self.o.payload.data[k].eq(clamp(round_shift_const(p6, P.frac), X.lo, X.hi))]
        osb6 = delay(m, adv, osb3, 3, "osb3")
        v6 = delay(m, adv, self.apply_o[0].o_valid, 3, "ov")
        with m.If(adv):
            m.d.sync += [self.o.valid.eq(v6), self.o.payload.read.eq(osb6.read), self.o.payload.last.eq(osb6.last),
                         o_end.eq(osb6.end)]
        return m


# KDA dimensions per chip preset (hw.params.ChipParams.name); proposed for merging into ChipParams.
KDA_PRESETS: dict[str, KdaParams] = {
    "nano": KdaParams(heads=2, dh=32, conv_k=4, max_layers=2, lanes=2),
    "tiny": KdaParams(heads=1, dh=16, conv_k=4, max_layers=2, lanes=1),
}


def kda_params_for(chip) -> KdaParams:
    try:
        return KDA_PRESETS[chip.name]
    except KeyError:
        raise ValueError(f"no KDA dimensions for chip preset {chip.name!r}; known: {', '.join(KDA_PRESETS)}") from None


def kda_engine_block(chip, params: KdaParams | None = None) -> KdaEngine:
    """The block rtl_gen emits (``params``: another build for the tests)."""
    return KdaEngine(params or kda_params_for(chip))


def kda_engine_derived(chip, params: KdaParams | None = None) -> dict:
    kp = params or kda_params_for(chip)
    return {"heads": kp.heads, "dh": kp.dh, "conv_k": kp.conv_k, "max_layers": kp.max_layers, "lanes": kp.lanes,
            "state_transfers": kp.state_transfers, "transfers": kp.transfers,
            "drain": KdaEngine.drain(kp), "z_drain": KdaEngine.z_drain(kp),
            "sel": {s.name: int(s) for s in Sel}, "rom_dir": ROM_DIR, "roms": ["sigmoid", "kda_decay", "rsqrt"]}
