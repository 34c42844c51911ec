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
the engine counts those of K, V, B and F (``KdaParams.row_transfers``) and starts the state update after
the last of them, while Q's and Z's are still taken; its second pass waits for q's norms (the chip sends
K, V, B, F, Q, then Z: Q's transfers overlap the first pass, the state update never waits for Z; the
output pipeline waits until every transfer of the position is in). ``last`` marks
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
indices. The state, history and row-buffer SRAMs are two banks each (hw/kda_front.py ``banked_sram``), so
the write-backs of the rows and the ingest never meet a read in the same macro (fakeram45 has one port);
q has an SRAM of its own (written while the first pass writes k_hat, read by the second).
  ingest   element pipeline, one transfer a cycle (``i.ready`` = 1 until ``last``), per lane: conv window
           from the history SRAM, taps, Sigmoid / KdaDecay, SiLU multiply, into the row buffer SRAM (k, v,
           alpha per index), the q SRAM and the gate SRAM (sigmoid(z), w); running sums of q^2, k^2 per head.
  norms    after the last K/V/B/F transfer: rsqrt of every head's sum of k^2, back to back; after the last
           Q transfer, of every head's sum of q^2.
  rows     per head, one state row a cycle through one pipeline (9 stages): pass 1 decays S[i] by
           alpha[i], writes it back, accumulates kS += k_hat[i] S'[i] (k_hat by ApplyMant, kept in the
           row buffer); u = v - kS, beta u on the column multipliers (an 8-cycle gap); pass 2 (once q's
           norms are back) S'' = S' + k_hat[i] beta u, written back, read += q_hat[i] S''[i] (q_hat by
           ApplyMant from the q SRAM). The next head's pass 1
           follows pass 2 without a gap (the first row of a pass loads the accumulators).
  tail     per head, overlapping the next head's rows: read is copied into a register rotating by L,
           sum read^2 (L squarers, dh / L cycles), rsqrt, then the back-pressured output pipeline, L lanes
           (ApplyMant, gain, x sigmoid(z); one gate SRAM word a transfer), once Z is in. ``i.ready`` rises
           again after the last output.
Each column has two multipliers (33 x 25: S alpha, bu k_hat, u beta; 32 x 24: S' k_hat, S'' q_hat); every
multiply has a stage of its own, rounding shifts and saturation take the next one.

Latency (no idles, no back-pressure; ``KdaEngine.drain`` / ``q_drain`` / ``z_drain``, measured by
verification/test_kda_engine.py ``kda_latency``): ingest takes one cycle per transfer; the last output
leaves at max(t_s + drain, t_q + q_drain, t_z + z_drain), t_s the cycle of the last K/V/B/F transfer, t_q
that of the last Q transfer, t_z that of the position's last transfer. A head's rows take R = 2 dh + 8 cycles (two passes, the bu gap), its tail
T = 2 dh / L + 16 (1 takes read, dh / L + 2 sum read^2, 1 + 5 rsqrt, dh / L output transfers behind the
7-stage output pipeline). drain = 2 dh + 35 + (H - 1) max(R, T) + T - 1: 13 drain the ingest pipeline and
7 get head 0's rsqrts (first row at 20), 2 dh + 7 issue head 0's rows, 8 finish its last one, then each
further head's read is taken max(R, T) after the previous one (the tails set the pace at L=1, the rows at
L=2 once dh >= 16), the last output in the last tail's last cycle: nano (H=2, dh=32) 218 at L=2
(T=48 < R=72), 258 at L=1 (T=80); tiny (H=1, dh=16) 98 at L=2 (T=32), 114 at L=1 (T=48). z_drain (Z so
late that head 0's outputs wait for it) = 12 to the gate SRAM + dh / L + 6 for head 0's outputs
+ (H - 1) T: nano 82 at L=2, 130 at L=1; tiny 26 at L=2, 34 at L=1. q_drain (Q so late that head 0's
second pass waits for its norms) = 20 + H + dh + 7 + (H - 1) max(R, T) + T - 1: nano 180 at L=2. A
position in the chip's order, Q and Z right behind F: 3 P / L + ceil(H / L) cycles of K, V, B, F
transfers, then drain (Q's and Z's transfers overlap it): nano 97 + 218 = 315 cycles at L=2 (129 + 218 = 347
with Q before the rows, as until issue 21); at L=1 Q's 64 transfers end so late that its norms set the
pace, 194 + 64 + 220 = 478 (was 516); tiny 25 + 98 = 123 at L=2.

Code: this file holds the parameters' formulas and the composition; the parts add their logic to its
module: hw/kda_front.py (SRAMs, ingest), hw/kda_state.py (rsqrt requests, row pipeline, row issue),
hw/kda_tail.py (tail and output pipeline); hw/kda_params.py has the parameters and stream layouts.
"""
from __future__ import annotations

import math
from types import SimpleNamespace

from amaranth.hdl import Array, Const, Module, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from hw.kda_front import ingest, storage
from hw.kda_params import KdaParams, Sel, in_layout, out_layout
from hw.kda_state import row_issue, row_pipeline, rsqrt_requests
from hw.kda_tail import tail
from hw.lib.lut import ApplyMant, LutEval, Rsqrt, Sigmoid
from hw.lib.lut_rom import port_of
from hw.lib.pipe import round_shift_const
from hw.params import require_instance
from hw.roms import ROM_DIR
from nano_k3 import fxp_math
from nano_k3.config import L2_EPS, RMS_EPS
from nano_k3.fxp_ops import SQ_FRAC, UNIT, P, S, X


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
    # row pipeline stages (row issued at stage 0): 1 SRAM words (product A's operand B registered), 2 column
    # product A, 3 rounded row, 4 state write-back and k_hat / q_hat (buffer write), 5 column product B,
    # 6 accumulators, 7 u / read captured (R_ACC)
    R_HAT = 1 + ApplyMant.LATENCY
    R_ACC = R_HAT + 3
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
        """Cycles from the last K/V/B/F transfer to the last output transfer (no back-pressure, Q and Z in by then,
        Q early enough that q's norms are back before head 0's second pass: ``q_drain`` otherwise).

        The rows start E_SUMS + Rsqrt.LATENCY + 2 cycles after it (sums complete, head 0's rsqrts); head 0's
        last pass-2 row follows head_rows - 1 later, its read R_ACC + 1 later; each further head's read is
        taken one head_rows or one tail later, whichever is longer (a read waits for the tail; a tail, for
        its head's rows); the last output leaves in the last tail's last cycle."""
        first_row = cls.E_SUMS + Rsqrt.LATENCY + 2
        head0_read = first_row + cls.head_rows(p) - 1 + cls.R_ACC + 1
        tail = cls.tail_cycles(p)
        return head0_read + (p.heads - 1) * max(cls.head_rows(p), tail) + tail - 1

    @classmethod
    def q_drain(cls, p: KdaParams) -> int:
        """Cycles from the last Q transfer to the last output transfer when Q comes so late that head 0's
        second pass waits for q's norms (Z in by then): the sums complete, the H q rsqrts (requested after
        any k ones), ``q_ready``; then head 0's second pass, its read, the other heads and tails as in
        ``drain``."""
        first_p2 = cls.E_SUMS + Rsqrt.LATENCY + p.heads + 2
        head0_read = first_p2 + p.dh - 1 + cls.R_ACC + 1
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
        L = p.lanes
        ctx = SimpleNamespace(core=self, p=p, H=p.heads, dh=p.dh, K=p.conv_k, Pw=p.width, L=L,
                              lg_l=L.bit_length() - 1, ip=self.i.payload, one=Const(1, 1),
                              hbits=max(1, (p.heads - 1).bit_length()))
        # lane of index i in its SRAM word
        ctx.lane_of = lambda i: i[0] if L == 2 else Const(0, 1)    # noqa: E731
        for part in (storage, _units, _control_state, ingest, rsqrt_requests, row_pipeline, row_issue, tail):
            part(m, ctx)
        return m


def _units(m: Module, ctx) -> None:
    """The LUT units and ApplyMants the parts share: L Sigmoids, the L-lane kda_decay table, the Rsqrt,
    ApplyMant of k_hat, q_hat and every output lane."""
    core, L = ctx.core, ctx.L
    sig = [Sigmoid(rom_dir=core.rom_dir, port=port_of(core.roms, "sigmoid", k)) for k in range(L)]
    for k in range(L):
        m.submodules[f"sigmoid{k}"] = sig[k]
    # KdaDecay (its front end ``decay_table_input``) on L lanes of one LutEval: its lanes read the two
    # ports of one kda_decay ROM (its own, or the one ``roms["kda_decay"]`` names)
    dec_ports = tuple(port_of(core.roms, "kda_decay", k) for k in range(L))
    m.submodules.decay = dec = LutEval("kda_decay", lanes=L, rom_dir=core.rom_dir,
                                       port=dec_ports if all(dec_ports) else None)
    m.submodules.rsqrt = rsq = core.rsqrt
    m.submodules.apply_k = apk = core.apply_k
    m.submodules.apply_q = apq = core.apply_q
    for k, apo in enumerate(core.apply_o):
        m.submodules[f"apply_o{k}"] = apo
    vars(ctx).update(sig=sig, dec=dec, rsq=rsq, apk=apk, apq=apq)


def _control_state(m: Module, ctx) -> None:
    """The two controllers' state registers (issue: ``ISSUE``, tail: ``TAIL``; codes from 1, no ``== 0``),
    the position's counters and the per-head beta, sums of squares and rsqrt results."""
    ip, dh, core, H, rsq, p = ctx.ip, ctx.dh, ctx.core, ctx.H, ctx.rsq, ctx.p
    # Two controllers, each a state register with one If per state (codes from 1: no `== 0`).
    ISSUE = {n: k + 1 for k, n in enumerate(("INGEST", "DRAIN", "P1", "BU", "P2", "FINISH"))}
    TAIL = {n: k + 1 for k, n in enumerate(("IDLE", "SS", "RSQ", "OUT"))}
    state = Signal(range(len(ISSUE) + 1), init=ISSUE["INGEST"])
    tstate = Signal(range(len(TAIL) + 1), init=TAIL["IDLE"])
    layer = Signal.like(ip.layer)
    restart = Signal()
    cnt = Signal(range(max(dh, core.E_SUMS + Rsqrt.LATENCY, core.BU_GAP) + 2))
    row = Signal(range(dh))
    head = Signal(range(max(2, H)))
    beta = Array(Signal(P.bits, name=f"beta_{h}") for h in range(H))
    ssq = Array(Signal(core.l2_bits, name=f"ssq_{h}") for h in range(H))
    ssk = Array(Signal(core.l2_bits, name=f"ssk_{h}") for h in range(H))
    mant_k, mant_q = (Array(Signal(len(rsq.o.mant), name=f"mant_{n}{h}") for h in range(H)) for n in "kq")
    e_k, e_q = (Array(Signal(rsq.o.e.shape(), name=f"e_{n}{h}") for h in range(H)) for n in "kq")
    mant_o, e_o = Signal.like(rsq.o.mant, name="mant_o"), Signal.like(rsq.o.e, name="e_o")
    pos_done = Signal()
    take = Signal()
    accept = Signal(init=1)             # the position's last transfer is not yet taken
    n_state = Signal(range(p.row_transfers))        # K, V, B, F transfers taken
    in_done = Signal()                  # every transfer of the position is in the SRAMs (Z for the outputs)
    m.d.comb += [core.i.ready.eq(accept), take.eq(core.i.valid & accept)]
    vars(ctx).update(ISSUE=ISSUE, TAIL=TAIL, state=state, tstate=tstate, layer=layer, restart=restart, cnt=cnt,
                     row=row, head=head, beta=beta, ssq=ssq, ssk=ssk, mant_k=mant_k, mant_q=mant_q, e_k=e_k,
                     e_q=e_q, mant_o=mant_o, e_o=e_o, pos_done=pos_done, take=take, accept=accept, n_state=n_state,
                     in_done=in_done)



def kda_params_for(chip) -> KdaParams:
    """The chip's KDA engine: its model's dimensions at ``chip.kda_lanes`` elements a transfer."""
    return KdaParams.for_model(chip.model, chip.kda_lanes)


def kda_engine_block(chip, params: KdaParams | None = None) -> KdaEngine:
    """The block rtl_gen emits (``params``: another build for the tests)."""
    return KdaEngine(params or kda_params_for(chip))


def kda_engine_derived(chip, params: KdaParams | None = None) -> dict:
    kp = params or kda_params_for(chip)
    return {"heads": kp.heads, "dh": kp.dh, "conv_k": kp.conv_k, "max_layers": kp.max_layers, "lanes": kp.lanes,
            "state_transfers": kp.state_transfers, "row_transfers": kp.row_transfers, "transfers": kp.transfers,
            "drain": KdaEngine.drain(kp), "q_drain": KdaEngine.q_drain(kp), "z_drain": KdaEngine.z_drain(kp),
            "sel": {s.name: int(s) for s in Sel}, "rom_dir": ROM_DIR, "roms": ["sigmoid", "kda_decay", "rsqrt"]}
