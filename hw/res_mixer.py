"""The residual mixer: MIX(cands, name) of SPEC §6.2, bit-exact to ``nano_k3.fixed.residual_mix``.

Arithmetic (formats in docs/fixed_point.md; every width is derived from ``nano_k3`` at construction):

    h_j     = (2^13 + w_j) · proj_j                 exact (frac 13 + 11), per element index
    (m_k, e_k) = rms_rsqrt(c_k)                     Σc² exact, rounded to SQ_FRAC, + eps·d, rsqrt LUT
    score_k = X.fit(apply_mant(round(Σ_j c_kj h_j, MIX_DOT_FRAC), m_k, e_k))
                                                    = dot(RN(c_k, w), proj), the dot exact while c streams in
    t_k     = to_log2(score_k)                      × log2 e (C_FRAC), round, saturate → T
    e_k     = exp2_neg(max t − t_k)                 P (UQ1.23)
    mixed_j = apply_mant(round(Σ_k e_k c_kj, X.frac), recip(Σ e)) → X (saturate)

Streams (all ``amaranth.lib.stream``); K = ``ResMixerParams.lanes`` consecutive element indices per
transfer, a transfer starting at element index j (a multiple of K):
* ``i``   K element indices of every candidate per transfer (``cand_layout``): ``data[k][l]`` (X) is
  element j + l of candidate k, oldest first, the current vector is candidate n − 1; entries k >= n
  are don't-care. ``n`` (1..max_cands) is read on the first transfer of a mix (hold it through the
  mix); ``last`` marks the transfer of element d − 1, the end of the mix. Transfers come in element
  order and their count sets d = K · transfers (d a power of two, K..max_d; anything else is undefined).
* ``w``, ``proj``  K int16 each (``param_layout``): ``w[l]`` the norm offset (Q2.13) and ``proj[l]``
  the score projection (Q4.11) of element j + l; both are joined with ``i`` on every transfer (the
  three transfer in the same cycle; each stream's ready waits for the other two valids).
* ``o``   the mixed vector, K X elements per transfer (``out_layout``: ``data[l]`` is element j + l),
  d / K transfers, ``last`` on the final one.
* ``e``   (only with ``trace_e``) the n unnormalised softmax weights e_k (P), ``last`` on the final one,
  for traces; it must be consumed (the next mix's score waits for it).

Storage. One ``msh_sram`` of max_d / K words holds, at address a, K element groups (element
K·a + l at group l); a group is element K·a + l of every candidate slot (each slot X.bits rounded up
to whole bytes). A transfer writes one word (all byte strobes). The combine reads all candidates of K
elements in one access, so it runs at K elements per cycle with max_cands × K lanes. nano (max_cands 2,
max_d 64): 64 × 64 bits at K = 1, 32 × 128 at K = 2, 16 × 256 at K = 4, 8 × 512 at K = 8.
LUTs: ``hw.lib.lut`` Rsqrt, Exp2Neg, Recip, one of each (one msh_rom each, ``<rom_dir>/<table>.hex``).

Lanes. Candidate k owns lane k: K X × X multipliers (c_kj²), K X × h multipliers (c_kj · h_j) and two
accumulators, Σc² and the score dot (each adds the K products of a cycle in one adder, no tree stage); the
K products h_j = gain_j · proj_j are formed once per transfer for every candidate. The combine forms the
exact products e_k · c_kj on the dot's multipliers (a buffer word for c, e_k for h: the ingest and the
combine of a mix never overlap, so the next mix's ingest waits for the last ``o``); it has K output
ApplyMant (× recip). Everything per candidate but not per element
(the + eps·d rounding, the score's × rsqrt, to_log2, max, Exp2Neg, Σe, Recip) runs one candidate per cycle
on one shared Rsqrt / score ApplyMant / Exp2Neg / Recip. The score is linear in c_k after RMSNorm's scale,
so it needs no pass over the buffer after the norms (the mixer had one until issue 21: d/K + 13 cycles a
mix).

Schedule (one mix at a time):
    ingest     K element indices per cycle: SRAM write; per lane, c_kj and h_j | K c_kj², K c_kj·h_j |
               accumulate both sums
    rsqrt      per candidate, one per cycle: mux Σc²_k, + eps·d, round to SQ_FRAC (register) | Rsqrt
    score      per candidate, one per cycle: mux the dot, round to MIX_DOT_FRAC | ApplyMant × mant_k, e_k,
               saturate to X | × log2 e (two 25-bit halves) | round → t_k | store, running max
    softmax    Exp2Neg of max t − t_k (one per cycle) and Σe | Recip; the combine's reads start
               ``COMBINE_LEAD`` cycles after the Recip issue, so the first word leaves the lanes' products
               as 1 / Σe arrives
    combine    d / K SRAM reads (1/cycle), every lane: e_k × c_kj (on the dot's multipliers) | Σ_k, round |
               ApplyMant(× recip mant, shift, saturate) → ``o``; a stall-able pipeline
               (``~o.valid | o.ready``).
The next mix's ingest starts after the last ``o`` transfer (the combine holds the lanes' multipliers until
then); its rsqrt waits until the previous mix's ``e`` is out.
Latency (no stalls, ``ResMixer.latency``, checked by the test): the last ``o`` transfer leaves
2·d/K + 3·n + 27 cycles after the first ``i`` transfer was accepted (with the present hw.lib.lut
latencies); nano (d = 64): K = 1: 161 cycles for n = 2, 158 for n = 1, 167 for n = 4; K = 2: 97 for
n = 2, 94 for n = 1, 103 for n = 4; K = 4: 65 for n = 2; K = 8: 49 for n = 2, 46 for n = 1, 55 for n = 4
(before issue 21's changes K = 4, n = 2 took 91 with a score pass and 69 with the combine after 1 / Σe).

Code: this file holds the parameters, the latency formula and the composition; hw/res_mixer_parts.py
the buffer and ingest, the controller, the lanes, the running max and the combine.
"""
from __future__ import annotations

import inspect
from dataclasses import dataclass
from types import SimpleNamespace

from amaranth.hdl import Module, signed, unsigned
from amaranth.lib import stream, wiring
from amaranth.lib.data import ArrayLayout, StructLayout
from amaranth.lib.wiring import In, Out

from hw.lib.lut import ApplyMant, Exp2Neg, Recip, Rsqrt
from hw.lib.lut_rom import port_of
from hw.params import require_instance, signed_bits
from hw.res_mixer_parts import (COMBINE_LEAD, LANE_LATENCY, W_FRAC, buffer_and_ingest, combine, controller, lanes,
                                running_max)
from hw.roms import ROM_DIR
from nano_k3 import fxp_math, luts
from nano_k3.fixed import MIX_DOT_FRAC, Q4_11
from nano_k3.fxp_ops import SQ_FRAC, P, T, X
from nano_k3.tensors import PARAM_BITS

PROJ_FRAC = Q4_11      # proj Q4.11 (fixed.residual_mix)
NUM_FRAC = X.frac      # softmax_combine rounds the numerator Σ e·v to X.frac fractional bits
# RMSNorm epsilon of residual_mix: the default of the reference's rmsnorm, read from its signature.
RMS_EPS = inspect.signature(fxp_math.rmsnorm).parameters["eps"].default


@dataclass(frozen=True)
class ResMixerParams:
    """Build maxima of the residual mixer (SPEC §6.2: nano mixes 2 candidates of d_model = 64)."""

    max_cands: int = 4         # snapshot lists grow with layers / res_block
    max_d: int = 64            # largest vector length (a power of two)
    lanes: int = 1             # K: element indices per transfer and per cycle of every pass (a power of two)
    trace_e: bool = True       # add the ``e`` output stream (softmax weights, for traces)
    rom_dir: str = ROM_DIR      # where $readmemh finds the LUT hex files (see hw.lib.lut_rom)

    def __post_init__(self) -> None:
        for name, lo, hi in (("max_cands", 1, 16), ("max_d", 2, 4096), ("lanes", 1, 2048)):
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool) or not lo <= v <= hi:
                raise ValueError(f"{name} must be an integer in {lo}..{hi}, got {v!r}")
        if self.max_d & (self.max_d - 1):
            raise ValueError(f"max_d must be a power of two (RMSNorm divides by a shift), got {self.max_d}")
        if self.lanes & (self.lanes - 1):
            raise ValueError(f"lanes must be a power of two (element j is group j mod K of word j / K), "
                             f"got {self.lanes}")
        if self.max_d < 2 * self.lanes:
            raise ValueError(f"max_d must be at least 2 · lanes (the buffer holds at least two words), "
                             f"got max_d {self.max_d} with lanes {self.lanes}")
        if not isinstance(self.trace_e, bool):
            raise ValueError(f"trace_e must be a bool, got {self.trace_e!r}")
        if not isinstance(self.rom_dir, str) or not self.rom_dir:
            raise ValueError(f"rom_dir must be a non-empty path string, got {self.rom_dir!r}")


def cand_layout(max_cands: int, lanes: int) -> StructLayout:
    """K = lanes element indices of every candidate (``data[k][l]``); ``n`` holds 1..max_cands."""
    return StructLayout({"data": ArrayLayout(ArrayLayout(signed(X.bits), lanes), max_cands),
                         "n": unsigned(max_cands.bit_length()), "last": unsigned(1)})


def param_layout(lanes: int) -> ArrayLayout:
    """``w`` / ``proj``: one int16 per element index of the transfer."""
    return ArrayLayout(signed(PARAM_BITS), lanes)


def out_layout(lanes: int) -> StructLayout:
    return StructLayout({"data": ArrayLayout(signed(X.bits), lanes), "last": unsigned(1)})


def e_layout() -> StructLayout:
    return StructLayout({"data": unsigned(P.bits), "last": unsigned(1)})


def sram_shape(params: ResMixerParams) -> tuple[int, int]:
    """(words, bits per word) of the candidate buffer: max_d / K words of K element groups, a group
    being max_cands X slots of whole bytes."""
    group_bits = params.max_cands * 8 * -(-X.bits // 8)
    return params.max_d // params.lanes, params.lanes * group_bits

class ResMixer(wiring.Component):
    """Attention-residual mixer (see the module docstring for streams, storage and schedule)."""

    def __init__(self, params: ResMixerParams = ResMixerParams(), *, roms=None):
        """``roms``: shared-ROM ports by table name (``hw.lib.lut_rom.shared_rom``), else each LUT owns its ROM."""
        require_instance(self, params, ResMixerParams)
        self.params = p = params
        self.log2_max_d = p.max_d.bit_length() - 1
        self.log2_lanes = p.lanes.bit_length() - 1
        self.addr_bits = self.log2_max_d - self.log2_lanes      # buffer words: max_d / K
        xb, xf = X.bits, X.frac
        # SRAM word: K element groups of max_cands slots of whole bytes, then w and proj
        self.slot_bits = 8 * -(-xb // 8)
        self.sram_words, self.word_bits = sram_shape(p)
        self.group_bits = self.word_bits // p.lanes
        # Σc² exact (acc_bits), then rounded to SQ_FRAC with eps·d folded into the rounding constant:
        # round_shift(a, s) + eps = (a + 2^(s-1) + eps·2^s) >> s   (ss_bits, the Rsqrt input)
        self.eps = [fxp_math.eps_int(RMS_EPS * (1 << l), SQ_FRAC) for l in range(self.log2_max_d + 1)]
        self.sq_shift = 2 * xf - SQ_FRAC
        sq_max = p.max_d * (1 << (2 * (xb - 1)))
        self.acc_bits = sq_max.bit_length()
        ss_max = (sq_max + (1 << (self.sq_shift - 1))) >> self.sq_shift if self.sq_shift > 0 else sq_max << -self.sq_shift
        self.ss_bits = (ss_max + max(self.eps)).bit_length()
        self.frac_bits = (SQ_FRAC + self.log2_max_d).bit_length()
        # the score dot: h_j = gain_j · proj_j exact, Σ_j c_kj · h_j exact, then rounded to MIX_DOT_FRAC
        g_lo, g_hi = (1 << W_FRAC) - (1 << (PARAM_BITS - 1)), (1 << W_FRAC) + (1 << (PARAM_BITS - 1)) - 1
        pj = 1 << (PARAM_BITS - 1)
        h_lo, h_hi = min(g_lo * (pj - 1), g_hi * -pj), max(g_lo * -pj, g_hi * (pj - 1))
        self.h_bits = signed_bits(h_lo, h_hi)
        dot_hi = p.max_d * (1 << (xb - 1)) * max(-h_lo, h_hi)
        self.dot_bits = signed_bits(-dot_hi, dot_hi)
        self.dot_shift = xf + W_FRAC + PROJ_FRAC - MIX_DOT_FRAC
        self.log2e_lo_bits = (fxp_math.LOG2E_Q24.bit_length() + 1) // 2
        exp2 = luts.tables()["exp2"]
        if exp2.index_bits + exp2.interp_bits != T.frac:
            raise ValueError(f"exp2 table: index {exp2.index_bits} + interp {exp2.interp_bits} bits != T.frac {T.frac}")
        self.t_shift = xf + fxp_math.C_FRAC - T.frac              # to_log2(score, X.frac) -> T
        self.t_bits = T.bits
        self.esum_bits = (p.max_cands * int(exp2.base.max())).bit_length()
        self.num_shift = P.frac + xf - NUM_FRAC
        e_max = int(exp2.base.max())
        prod_sum = p.max_cands * e_max * (1 << (xb - 1))
        self.num_bits = signed_bits(-prod_sum, prod_sum) - max(self.num_shift, 0) + 1
        self.cnt_bits = self.addr_bits + 1          # transfers / word reads of one mix: 1..max_d / K
        self.k_bits = max(1, (p.max_cands - 1).bit_length())
        # LUT-unit cores (constructed here so that their widths are known for the members): one Rsqrt,
        # score ApplyMant, Exp2Neg and Recip shared by the candidates, K output ApplyMant (× 1 / Σe)
        self.rsqrt = Rsqrt(m_bits=self.ss_bits, frac_bits=self.frac_bits, rom_dir=p.rom_dir,
                           port=port_of(roms, "rsqrt"))
        self.exp2 = Exp2Neg(t_bits=T.bits, rom_dir=p.rom_dir, port=port_of(roms, "exp2"))   # max t − t_k
        self.recip = Recip(m_bits=self.esum_bits, frac_bits=P.frac.bit_length(), rom_dir=p.rom_dir,
                           port=port_of(roms, "recip"))
        self.score_apply = ApplyMant(v_bits=self.dot_bits - self.dot_shift + 1, v_frac=MIX_DOT_FRAC, out_frac=xf,
                                     out_bits=xb, e_range=self.rsqrt.e_range,
                                     mant_bits=luts.tables()["rsqrt"].base_bits)
        if P.bits + 1 > self.h_bits:
            raise ValueError(f"the combine's e (P, {P.bits} bits) must fit the dot multipliers' h operand "
                             f"({self.h_bits} bits)")
        self.apply_o = [ApplyMant(v_bits=self.num_bits, v_frac=NUM_FRAC, out_frac=xf, out_bits=xb,
                                  e_range=self.recip.e_range, mant_bits=luts.tables()["recip"].base_bits)
                        for _ in range(p.lanes)]
        members = {
            "i": In(stream.Signature(cand_layout(p.max_cands, p.lanes))),
            "w": In(stream.Signature(param_layout(p.lanes))),
            "proj": In(stream.Signature(param_layout(p.lanes))),
            "o": Out(stream.Signature(out_layout(p.lanes))),
        }
        if p.trace_e:
            members["e"] = Out(stream.Signature(e_layout()))
        super().__init__(members)

    @staticmethod
    def latency(n: int, d: int, lanes: int = 1) -> int:
        """Cycles from the first accepted ``i`` transfer to the last ``o`` transfer of a mix of n
        candidates of d elements on a build with ``lanes`` = K, no idles, no back-pressure.

        d / K words: d / K ingest cycles and 3 to finish Σc² and the dots; n Rsqrt issues (after one
        register stage); n score issues, the score ApplyMant and the to_log2 pipeline (× log2 e, round,
        store); n Exp2Neg issues and one cycle to collect; the Recip issue and ``COMBINE_LEAD`` − 1 cycles
        (the first word meets 1 / Σe after the lanes' products); d / K combine reads and the combine
        pipeline (read, the lanes' e·c, ApplyMant × recip).
        """
        if lanes < 1 or lanes & (lanes - 1) or d < lanes or d % lanes:
            raise ValueError(f"d must be a positive multiple of lanes (a power of two), got d {d!r}, lanes {lanes!r}")
        words = d // lanes
        lat_rs, lat_am, lat_ex = Rsqrt.LATENCY, ApplyMant.LATENCY, Exp2Neg.LATENCY
        ingest = words + 3 + n + lat_rs              # the candidates' rsqrts are back
        score = n + lat_am + 2                       # score issues .. first Exp2Neg issue
        softmax = n + lat_ex + COMBINE_LEAD          # Exp2Neg issues .. first combine read
        combine = words + 1 + LANE_LATENCY + lat_am  # combine reads .. last o
        return ingest + score + softmax + combine

    def elaborate(self, platform):
        m = Module()
        p, xb = self.params, X.bits
        K, A, kb_w, nc = p.lanes, self.addr_bits, self.k_bits, p.max_cands
        m.submodules.rsqrt = rsqrt = self.rsqrt
        m.submodules.exp2 = exp2 = self.exp2
        m.submodules.recip = recip = self.recip
        m.submodules.score_apply = self.score_apply
        for l, am in enumerate(self.apply_o):
            m.submodules[f"apply_o_{l}"] = am
        ctx = SimpleNamespace(unit=self, p=p, xb=xb, K=K, A=A, kb_w=kb_w, nc=nc, rsqrt=rsqrt, exp2=exp2, recip=recip)
        for part in (buffer_and_ingest, controller, lanes, running_max, combine):
            part(m, ctx)
        return m


# --- rtl_gen entry (rtl_gen.emit.BLOCKS) ----------------------------------------------------------------
# The emitted block is the default build maxima at K = 2; the chip's sequencer builds its own mixer
# (max_cands from the program, K = ChipParams.mix_lanes)
BLOCK_PARAMS = ResMixerParams(lanes=2)


def res_mixer_block(chip, params: ResMixerParams = BLOCK_PARAMS) -> ResMixer:
    """The block rtl_gen emits (``params``: another build for the tests)."""
    return ResMixer(params)


def res_mixer_derived(chip, params: ResMixerParams = BLOCK_PARAMS) -> dict:
    words, word_bits = sram_shape(params)
    k = params.lanes
    return {"max_cands": params.max_cands, "max_d": params.max_d, "lanes": k, "trace_e": params.trace_e,
            "rom_dir": params.rom_dir, "sram_words": words, "sram_word_bits": word_bits,
            "roms": ["rsqrt", "exp2", "recip"], "latency_n2_d64": ResMixer.latency(2, 64, k),
            "latency_d64": [ResMixer.latency(n, 64, k) for n in range(1, params.max_cands + 1)]}
