"""The MoE router: sigmoid scores, biased top-k (lowest index on ties), renormalised weights × 2.828.

Arithmetic (bit-exact to ``nano_k3.fixed``; formats in docs/fixed_point.md):

    score_e = router_scores(logit_e)                 sigmoid, X -> P (LUT unit)
    key_e   = score_e + bias_e · 2^(P.frac − 11)     bias Q4.11, exact
    top     = router_select(scores, bias, k)         stable: equal keys keep the lower index first
    w_j     = router_weights(score[top])             round(score·ROUTER_SCALE_Q24, frac P) × recip(Σ) → RW

Stream ``i``: one expert per transfer, in expert order 0, 1, … (at most ``max_experts``; elements
beyond are accepted and ignored). ``logit`` is the router matvec output (X), ``bias`` the expert's
``moe.bias`` entry (Q4.11, int16: data from weight storage, not a constant), ``last`` ends the
vector; ``top_k`` is read from the transfer that carries ``last`` and clamped to 1..max_top_k.
``choice``: the sorted slots' experts (``choice[j]`` = the expert of pair j), held from the cycle
``choice_valid`` is high (one cycle, once the last element is in the slots) until the next vector's
first insertion, so a consumer may start on the experts while the weights are computed.
Stream ``o``: min(k, E) pairs (``expert``, ``weight`` in RW), in selection order (the order of
``router_select``), ``last`` on the final pair. When every chosen score is 0 (all chosen logits at or
below −16, so Σ = 0 and ``router_weights`` is undefined: recip(0) raises) the weights are 0.

Schedule (one vector at a time; ``i.ready`` is low from the accepted ``last`` until the final
pair has been taken):
    collect   one expert per cycle: sigmoid (``hw.lib.lut.Sigmoid``, fixed latency), key register,
              insertion into ``max_top_k`` sorted slots (compare with every slot, shift the lower
              ones down)
    sum       Σ of the first k slot scores (masked adder tree)
    recip     reciprocal of the sum (``hw.lib.lut.Recip``), held for the whole vector
    emit      a 4-stage stall-able pipeline, one pair per cycle: select slot j | score × 2.828
              (a constant multiply + round, into ApplyMant's input register) | × recip mantissa
              (one 27 × 24 b multiply alone in its stage) | rounding barrel shift by the recip
              exponent, saturate → output register (``hw.lib.lut.ApplyMant``)
With no idles and no stalls the first pair leaves ``MoeRouter.latency(E)`` cycles (E + 17 with the
current LUT unit) after the first element was accepted and the others follow one per cycle: nano
(E = 8, k = 2) takes 25 cycles to the first pair, 27 to the last; then the next vector may start.
``choice_valid`` comes ``MoeRouter.choice_latency(E)`` cycles after the first element (nano: 14).
"""
from __future__ import annotations

from dataclasses import dataclass

from amaranth.hdl import Const, Module, Mux, Signal, signed, unsigned
from amaranth.lib import stream, wiring
from amaranth.lib.data import ArrayLayout, StructLayout
from amaranth.lib.wiring import In, Out

from hw.lib.lut import ApplyMant, Recip, Sigmoid
from hw.lib.lut_rom import port_of
from hw.lib.pipe import delay
from hw.params import int_in, require_instance
from hw.roms import ROM_DIR
from nano_k3.fixed import Q4_11, ROUTER_SCALE_FRAC, ROUTER_SCALE_Q24
from nano_k3.fxp_ops import RW, P, X

BIAS_BITS = 16              # moe.bias is int16 Q4.11 (SPEC §4.4)



@dataclass(frozen=True)
class MoeRouterParams:
    """Build maxima of the router (runtime E and k may be anything up to these)."""

    max_experts: int = 16
    max_top_k: int = 4

    def __post_init__(self) -> None:
        int_in("max_experts", self.max_experts, 2, 256)
        int_in("max_top_k", self.max_top_k, 1, self.max_experts)

    # Derived widths (from the formats of nano_k3.fxp_ops, never hard-coded) ---------------------
    @property
    def expert_bits(self) -> int:
        return max(1, (self.max_experts - 1).bit_length())

    @property
    def count_bits(self) -> int:
        return self.max_experts.bit_length()

    @property
    def top_k_bits(self) -> int:
        return self.max_top_k.bit_length()

    @property
    def bias_shift(self) -> int:
        """Left shift that aligns a Q4.11 bias to the score's P fraction."""
        return P.frac - Q4_11

    @property
    def key_bits(self) -> int:
        """Signed width of score + bias·2^shift: both ranges added, exact."""
        lo = -(1 << (BIAS_BITS - 1)) << self.bias_shift
        hi = ((1 << (BIAS_BITS - 1)) - 1 << self.bias_shift) + P.hi
        bits = 1
        while not (-(1 << (bits - 1)) <= lo and hi < 1 << (bits - 1)):
            bits += 1
        return bits

    @property
    def sum_bits(self) -> int:
        return (self.max_top_k * P.hi).bit_length()

    @property
    def num_bits(self) -> int:
        """round(score × 2.828 (ROUTER_SCALE_Q24)) with P.frac fraction bits."""
        return ((P.hi * ROUTER_SCALE_Q24 + (1 << (ROUTER_SCALE_FRAC - 1))) >> ROUTER_SCALE_FRAC).bit_length()

    @property
    def sum_lead_max(self) -> int:
        """Largest leading-one position of the sum (recip's exponent is P.frac − lead)."""
        return (self.max_top_k * P.hi).bit_length() - 1


def in_layout(p: MoeRouterParams) -> StructLayout:
    return StructLayout({
        "logit": signed(X.bits),          # X: router matvec output h · W_router
        "bias": signed(BIAS_BITS),        # Q4.11 moe.bias of this expert
        "top_k": unsigned(p.top_k_bits),  # k, read on the `last` transfer, clamped to 1..max_top_k
        "last": unsigned(1),
    })


def out_layout(p: MoeRouterParams) -> StructLayout:
    return StructLayout({
        "expert": unsigned(p.expert_bits),
        "weight": unsigned(RW.bits),      # RW (UQ2.22)
        "last": unsigned(1),
    })


class MoeRouter(wiring.Component):
    """Sigmoid scores, biased top-k with lowest index on ties, renormalised weights (module docstring)."""

    KEY_LATENCY = Sigmoid.LATENCY + 1          # accepted element -> its key in the key register
    EMIT_LATENCY = 1 + ApplyMant.LATENCY       # issue of pair j -> o.valid (slot select, then ApplyMant)

    def __init__(self, params: MoeRouterParams = MoeRouterParams(), *, rom_dir: str = ROM_DIR, roms=None):
        """``roms``: shared-ROM ports by table name (``hw.lib.lut_rom.shared_rom``), else each LUT owns its ROM."""
        require_instance(self, params, MoeRouterParams)
        if params.bias_shift < 0:
            self._MustUse__silence = True
            raise ValueError(f"P.frac={P.frac} is below the bias fraction {Q4_11}: the key would need a right shift")
        if not isinstance(rom_dir, str) or not rom_dir:
            self._MustUse__silence = True
            raise ValueError(f"rom_dir must be a non-empty path string, got {rom_dir!r}")
        self.params, self.rom_dir, self.roms = params, rom_dir, roms
        super().__init__({
            "i": In(stream.Signature(in_layout(params))),
            "o": Out(stream.Signature(out_layout(params))),
            "choice": Out(ArrayLayout(unsigned(params.expert_bits), params.max_top_k)),
            "choice_valid": Out(1),
        })

    @classmethod
    def latency(cls, n_experts: int) -> int:
        """Cycles from the first accepted element to the first o.valid, with no idles and no stalls:
        n_experts accepts, the key pipeline, one insertion, sum, recip start, recip, emit pipeline."""
        return cls.choice_latency(n_experts) + 1 + 1 + Recip.LATENCY + cls.EMIT_LATENCY

    @classmethod
    def choice_latency(cls, n_experts: int) -> int:
        """Cycles from the first accepted element to ``choice_valid`` (no idles): n_experts accepts, the key
        pipeline, the last insertion."""
        return (n_experts - 1) + cls.KEY_LATENCY + 1

    def elaborate(self, platform):
        m = Module()
        p, K = self.params, self.params.max_top_k
        ip = self.i.payload

        # --- collect: sigmoid, key, insertion into the sorted slots --------------------------------
        # one If per state, codes from 1: a casez over the state register (or `state == 0`, emitted as
        # `!state`) would need Verilator lint waivers
        COLLECT, SUM, RECIP, EMIT = range(1, 5)
        state = Signal(range(5), init=COLLECT)
        seen_last = Signal()                    # the vector's last element has been accepted
        count = Signal(p.count_bits)            # elements accepted (saturates at max_experts)
        kk = Signal(range(1, K + 1), init=1)    # k of the current vector
        take = Signal()
        collecting, emitting = Signal(), Signal()   # decoded in the state switch below
        m.d.comb += [self.i.ready.eq(collecting & ~seen_last), take.eq(self.i.valid & self.i.ready)]
        with m.If(take):
            m.d.sync += count.eq(Mux(count == p.max_experts, count, count + 1))
            with m.If(ip.last):
                m.d.sync += [seen_last.eq(1), kk.eq(Mux(~ip.top_k.any(), 1, Mux(ip.top_k > K, K, ip.top_k)))]

        m.submodules.sigmoid = sig = Sigmoid(rom_dir=self.rom_dir, port=port_of(self.roms, "sigmoid"))   # never stalls: en stays 1
        m.d.comb += [sig.i_valid.eq(take & (count < p.max_experts)), sig.i.x.eq(ip.logit)]
        one = Const(1, 1)
        bias_d = delay(m, one, ip.bias, Sigmoid.LATENCY, "bias")
        idx_d = delay(m, one, count[:p.expert_bits], Sigmoid.LATENCY, "idx")
        last_d = delay(m, one, take & ip.last, Sigmoid.LATENCY, "last")

        # key register: score + bias aligned to P (exact)
        kv, klast = Signal(), Signal()
        key = Signal(signed(p.key_bits))
        kscore = Signal(P.bits)
        kidx = Signal(p.expert_bits)
        # klast follows the last element even when it was beyond max_experts (then kv is low)
        m.d.sync += [kv.eq(sig.o_valid), klast.eq(last_d), kscore.eq(sig.o.y), kidx.eq(idx_d),
                     key.eq(sig.o.y + (bias_d << p.bias_shift))]

        # K slots sorted by key, descending; a new key goes below every slot whose key is >= it (a tie
        # keeps the earlier, lower index first), the slots below it shift down one place.
        slot_v = [Signal(name=f"slot_v{s}") for s in range(K)]
        slot_key = [Signal(signed(p.key_bits), name=f"slot_key{s}") for s in range(K)]
        slot_score = [Signal(P.bits, name=f"slot_score{s}") for s in range(K)]
        slot_idx = [Signal(p.expert_bits, name=f"slot_idx{s}") for s in range(K)]
        stay = [Signal(name=f"stay{s}") for s in range(K)]
        m.d.comb += [stay[s].eq(slot_v[s] & (slot_key[s] >= key)) for s in range(K)]
        clear = Signal()
        with m.If(clear):
            m.d.sync += [v.eq(0) for v in slot_v]
        with m.Elif(kv):
            for s in range(K):
                above_stays = one if s == 0 else stay[s - 1]    # the new key lands exactly here
                with m.If(~stay[s]):
                    with m.If(above_stays):
                        m.d.sync += [slot_v[s].eq(1), slot_key[s].eq(key), slot_score[s].eq(kscore),
                                     slot_idx[s].eq(kidx)]
                    with m.Else():
                        m.d.sync += [slot_v[s].eq(slot_v[s - 1]), slot_key[s].eq(slot_key[s - 1]),
                                     slot_score[s].eq(slot_score[s - 1]), slot_idx[s].eq(slot_idx[s - 1])]

        m.d.comb += [self.choice[s].eq(slot_idx[s]) for s in range(K)]

        # --- sum of the chosen scores, reciprocal ------------------------------------------------
        n_out = Signal(range(K + 1))            # pairs to emit: min(k, E)
        total = Signal(p.sum_bits)
        chosen = [Mux(slot_v[s] & (s < kk), slot_score[s], 0) for s in range(K)]
        m.submodules.recip = rec = Recip(m_bits=p.sum_bits, frac_bits=P.frac.bit_length(), rom_dir=self.rom_dir,
                                         port=port_of(self.roms, "recip"))
        recip_go = Signal()
        m.d.comb += [rec.i_valid.eq(recip_go), rec.i.m.eq(total), rec.i.frac.eq(P.frac)]
        e_range = (P.frac - p.sum_lead_max, P.frac)   # recip's exponent for a sum in 1 .. max_top_k·P.hi
        mant = Signal(P.bits)
        e = Signal(rec.o.e.shape())

        # --- emit: select slot j, × 2.828, × recip mantissa, rounding shift ------------------------
        m.submodules.apply = app = ApplyMant(v_bits=p.num_bits + 1, v_frac=P.frac, out_frac=RW.frac,
                                             out_bits=RW.bits, e_range=e_range, out_signed=False)
        adv = Signal()
        m.d.comb += [adv.eq(~self.o.valid | self.o.ready), app.en.eq(adv)]
        j = Signal(range(K + 1))
        issue = Signal()
        m.d.comb += issue.eq(emitting & (j < n_out) & adv)
        sv, slast = Signal(), Signal()
        sscore = Signal(P.bits)
        sidx = Signal(p.expert_bits)
        with m.If(adv):
            m.d.sync += [sv.eq(issue), slast.eq(j == n_out - 1), sscore.eq(0), sidx.eq(0)]
            for s in range(K):
                with m.If(~j.any() if s == 0 else j == s):
                    m.d.sync += [sscore.eq(slot_score[s]), sidx.eq(slot_idx[s])]
        with m.If(issue):
            m.d.sync += j.eq(j + 1)
        num = Signal(p.num_bits)                # round(score × 2.828), P.frac fraction bits
        m.d.comb += [num.eq((sscore * ROUTER_SCALE_Q24 + (1 << (ROUTER_SCALE_FRAC - 1))) >> ROUTER_SCALE_FRAC),
                     app.i_valid.eq(sv), app.i.v.eq(num), app.i.mant.eq(mant), app.i.e.eq(e)]
        oidx = delay(m, adv, sidx, ApplyMant.LATENCY, "oidx")
        olast = delay(m, adv, slast, ApplyMant.LATENCY, "olast")
        m.d.comb += [self.o.valid.eq(app.o_valid), self.o.payload.weight.eq(app.o.y),
                     self.o.payload.expert.eq(oidx), self.o.payload.last.eq(olast)]

        # --- sequencing ------------------------------------------------------------------------------
        wait = Signal(range(Recip.LATENCY + 1))
        with m.If(state == COLLECT):
            m.d.comb += collecting.eq(1)
            with m.If(klast):
                m.d.sync += state.eq(SUM)
        with m.Elif(state == SUM):               # the slots hold the whole vector now
            m.d.comb += self.choice_valid.eq(1)
            m.d.sync += [total.eq(sum(chosen)), n_out.eq(Mux(count < kk, count, kk)), state.eq(RECIP),
                         wait.eq(0)]
        with m.Elif(state == RECIP):
            m.d.comb += recip_go.eq(~wait.any())
            m.d.sync += wait.eq(wait + 1)
            with m.If(rec.o_valid):
                m.d.sync += [mant.eq(rec.o.mant), e.eq(rec.o.e), j.eq(0), state.eq(EMIT)]
        with m.Elif(state == EMIT):
            m.d.comb += emitting.eq(1)
            with m.If(self.o.valid & self.o.ready & self.o.payload.last):
                m.d.comb += clear.eq(1)
                m.d.sync += [state.eq(COLLECT), seen_last.eq(0), count.eq(0)]
        return m


# --- rtl_gen hooks (rtl_gen.emit.BLOCKS["moe_router"]) ---------------------------------------------
def moe_router_block(chip_params) -> MoeRouter:
    """The router of a chip build (its widths come from the formats and MoeRouterParams, not ChipParams)."""
    return MoeRouter(MoeRouterParams())


def moe_router_derived(chip_params) -> dict:
    p = MoeRouterParams()
    return {"max_experts": p.max_experts, "max_top_k": p.max_top_k, "key_bits": p.key_bits,
            "sum_bits": p.sum_bits, "num_bits": p.num_bits, "bias_shift": p.bias_shift,
            "key_latency": MoeRouter.KEY_LATENCY, "recip_latency": Recip.LATENCY,
            "emit_latency": MoeRouter.EMIT_LATENCY, "latency_e8": MoeRouter.latency(8),
            "choice_latency_e8": MoeRouter.choice_latency(8),
            "rom_dir": ROM_DIR, "roms": ["sigmoid", "recip"]}
