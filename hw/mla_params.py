"""Build parameters and derived widths of the MLA engine (hw.mla_engine), from the fixed-point model.

Every width below is computed at construction from ``nano_k3.fxp_ops`` formats, ``nano_k3.luts``
table geometry and exact integer bounds, so a change of X, P or a table re-sizes the engine.
Proposed for merging into hw/params.py as the MLA section of the chip parameters.
"""
from __future__ import annotations

from dataclasses import dataclass

from nano_k3 import fxp_math, luts
from nano_k3.fixed import mla_score_const
from nano_k3.fxp_ops import P, T, X

from hw.params import int_in, signed_bits

C_FRAC = fxp_math.C_FRAC      # fractional bits of the score constant (mla_score_const, to_log2)
MANT_FRAC = fxp_math.MANT_FRAC
# softmax_combine rounds the numerator sum e*v to X.frac fractional bits before the reciprocal.
NUM_FRAC = X.frac



def _rs(v: int, s: int) -> int:
    """fxp_ops.round_shift on Python ints (bounds may exceed int64)."""
    return (v + (1 << (s - 1))) >> s if s > 0 else v << -s


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def _lut_range(name: str) -> tuple[int, int]:
    """Smallest and largest interpolated output of a table (base + a fraction of delta)."""
    t = luts.tables()[name]
    lo = int((t.base + t.delta.clip(max=0)).min())
    hi = int((t.base + t.delta.clip(min=0)).max())
    return lo, hi


@dataclass(frozen=True)
class MlaParams:
    """Build maxima of the MLA engine; runtime H, dk, dr, dv, t may be anything up to them.

    Every one of the ``max_heads`` heads has its own cache bank, ``lanes`` multipliers and Exp2Neg,
    so the heads run in parallel and the area grows with ``max_heads``. The ``norm_units`` ApplyMant
    units (~8.6k um2 each in Nangate45) normalise the heads' context chunks ``norm_units`` lanes per
    cycle: fewer units cost heads x (lanes / norm_units - 1) cycles per position (the last chunk's; an
    earlier chunk's normalisation overlaps the next chunk unless t + 1 is shorter), less what the output
    hides: a head's beats leave while the next heads are normalised."""

    max_heads: int         # the model's dimensions (``for_model``)
    max_dk: int
    max_dr: int
    max_dv: int
    max_seq: int
    lanes: int = 16        # elements per cache word = multipliers per head
    norm_units: int = 4    # ApplyMant units = lanes normalised per cycle (a power of two dividing lanes)

    def __post_init__(self) -> None:
        int_in("max_heads", self.max_heads, 1, 64)
        for f in ("max_dk", "max_dr", "max_dv"):
            int_in(f, getattr(self, f), 1, 4096)
        int_in("max_seq", self.max_seq, 2, 1 << 16)
        int_in("lanes", self.lanes, 1, 128)
        if self.lanes & (self.lanes - 1):
            raise ValueError(f"lanes must be a power of two (word index = element >> log2 lanes), got {self.lanes}")
        int_in("norm_units", self.norm_units, 1, self.lanes)
        if self.norm_units & (self.norm_units - 1):
            raise ValueError(f"norm_units must be a power of two (a step's lane group is a bit field), "
                             f"got {self.norm_units}")
        if self.norm_units * X.bits % 8:
            raise ValueError(f"norm_units x X.bits must be whole bytes (a lane group is written to the q buffer "
                             f"by byte strobes), got {self.norm_units} x {X.bits}")
        if self.out_shift_min < 1:
            raise ValueError(f"final context shift would be {self.out_shift_min} < 1 with these formats")

    @classmethod
    def for_model(cls, cfg, lanes: int) -> "MlaParams":
        """The chip's engine for model config ``cfg`` (a ``nano_k3.config.ModelConfig``), ``lanes`` per word."""
        return cls(max_heads=cfg.mla_heads, max_dk=cfg.mla_dk, max_dr=cfg.mla_dr, max_dv=cfg.mla_dv,
                   max_seq=cfg.max_seq, lanes=lanes)

    # Geometry ------------------------------------------------------------------------------------
    @property
    def lanes_log2(self) -> int:
        return self.lanes.bit_length() - 1

    @property
    def norm_steps(self) -> int:
        """Cycles to normalise one head's chunk: its lanes, ``norm_units`` per cycle."""
        return self.lanes // self.norm_units

    @property
    def norm_steps_log2(self) -> int:
        return self.norm_steps.bit_length() - 1

    @property
    def max_dq(self) -> int:
        return self.max_dk + self.max_dr

    def words(self, d: int) -> int:
        return _ceil_div(d, self.lanes)

    @property
    def row_words(self) -> int:
        """Words per position in a head's cache bank: kc_h, then v_h (from the runtime ceil(dk/L) on)."""
        return self.words(self.max_dk) + self.words(self.max_dv)

    @property
    def kr_base(self) -> int:
        """Start of bank 0's kr region (kr is shared by the heads, so it is stored once): after the rows."""
        return self.max_seq * self.row_words

    def bank_depth(self, head: int) -> int:
        """Words of head ``head``'s cache bank: its rows, and the kr region in bank 0."""
        return self.kr_base + (self.max_seq * self.words(self.max_dr) if head == 0 else 0)

    @property
    def qbuf_depth(self) -> int:
        """A head's q buffer: q for the score pass, then the head's ctx chunks until they are output."""
        return max(2, self.words(self.max_dk) + self.words(self.max_dr), self.words(self.max_dv))

    @property
    def word_bits(self) -> int:
        return _ceil_div(self.lanes * X.bits, 8) * 8

    @property
    def cache_bits(self) -> int:
        return sum(self.bank_depth(h) for h in range(self.max_heads)) * self.word_bits

    @property
    def tbuf_bits(self) -> int:
        return _ceil_div(T.bits, 8) * 8

    @property
    def seq_bits(self) -> int:
        return max(1, (self.max_seq - 1).bit_length())

    @property
    def dim_bits(self) -> int:
        return max(self.max_dk, self.max_dr, self.max_dv, self.max_heads).bit_length()

    # Arithmetic widths (exact bounds) --------------------------------------------------------
    @property
    def c_bits(self) -> int:
        """Unsigned score constant log2(e)/sqrt(dq) * 2^C_FRAC; largest at dq = 1."""
        return mla_score_const(1).bit_length()

    @property
    def e_max(self) -> int:
        """Largest exp2_neg output (the table's largest interpolated value)."""
        return _lut_range("exp2")[1]

    @property
    def dot_range(self) -> tuple[int, int]:
        x = 1 << (X.bits - 1)
        return -self.max_dq * x * (x - 1), self.max_dq * x * x

    @property
    def dot_bits(self) -> int:
        return signed_bits(*self.dot_range)

    @property
    def prod_bits(self) -> int:
        """Lane multiplier: q x k (X x X) in the score pass, e x v (P x X) in the context pass."""
        x = 1 << (X.bits - 1)
        return signed_bits(min(-x * (x - 1), -self.e_max * x), max(x * x, self.e_max * (x - 1)))

    @property
    def mul_a_bits(self) -> int:
        return max(X.bits, P.bits + 1)

    @property
    def score_t_bits(self) -> int:
        """score (X, saturated) x c before the rounding to T."""
        return X.bits + self.c_bits + 1

    @property
    def t_shift(self) -> int:
        return X.frac + C_FRAC - T.frac

    @property
    def dt_bits(self) -> int:
        """max t - t_j, unsigned."""
        return T.bits + 1

    @property
    def sum_bits(self) -> int:
        return (self.e_max * self.max_seq).bit_length()

    @property
    def acc_range(self) -> tuple[int, int]:
        x = 1 << (X.bits - 1)
        return -self.max_seq * self.e_max * x, self.max_seq * self.e_max * (x - 1)

    @property
    def acc_bits(self) -> int:
        return signed_bits(*self.acc_range)

    @property
    def num_shift(self) -> int:
        return P.frac + X.frac - NUM_FRAC

    @property
    def num_bits(self) -> int:
        lo, hi = self.acc_range
        return signed_bits(_rs(lo, self.num_shift), _rs(hi, self.num_shift))

    @property
    def lead_min(self) -> int:
        """The maximum score's weight is exp2_neg(0) = base[0], so sum e >= base[0]."""
        return int(luts.tables()["exp2"].base[0]).bit_length() - 1

    @property
    def recip_e_range(self) -> tuple[int, int]:
        """recip(sum e, P.frac) exponent: P.frac - lead, lead in lead_min .. sum_bits - 1."""
        return P.frac - (self.sum_bits - 1), P.frac - self.lead_min

    @property
    def out_shift_min(self) -> int:
        return NUM_FRAC + MANT_FRAC - X.frac - self.recip_e_range[1]

    # Performance model ---------------------------------------------------------------------
    def load_cycles(self, heads: int, dk: int, dr: int, dv: int) -> int:
        """Input beats of a position (the feed: q, kc, kr, v segments)."""
        wk, wr, wv = self.words(dk), self.words(dr), self.words(dv)
        return heads * (wk + wr + wk) + wr + heads * wv

    def attention_cycles(self, t: int, heads: int, dk: int, dr: int, dv: int) -> int:
        """Cycles after the last input beat to the last output beat of position t with no stalls (exact)."""
        wk, wr, wv = self.words(dk), self.words(dr), self.words(dv)
        wq = wk + wr
        ws = max(wq, heads)             # score-pass cycles per position (the shared scaling: a head per cycle)
        score = t * ws + wq + SCORE_DRAIN + heads       # the last position's scores are scaled head by head
        steps = heads * self.norm_steps                 # normalisation of a chunk, one step per cycle
        # a chunk before the last: its (t+1) e x v words, but at least as long as its normalisation reads the
        # holding registers (chunk 0's waits for the reciprocals of sum e), while the next chunk accumulates
        before_last = sum(max(t + 1, steps + (RECIP_LATENCY if c == 0 else 0)) for c in range(wv - 1))
        # the last chunk: its words, the drain, its normalisation (after the reciprocals if it is chunk 0)
        # and the last head's last beat, read from its q buffer the cycle after its last write; the beats
        # before it leave while the chunk is normalised, one per cycle, each once it is written: a head's
        # final beat is written norm_steps cycles after the previous head's, so the heads' wv beats fall
        # behind only if wv > norm_steps
        last = (t + 1) + (RECIP_LATENCY if wv == 1 else 0) + CTX_DRAIN + steps
        return score + before_last + last + (heads - 1) * max(0, wv - self.norm_steps)

    def cycles(self, t: int, heads: int, dk: int, dr: int, dv: int) -> int:
        """Cycles from the first input beat to the last output beat of position t with no stalls (exact)."""
        return self.load_cycles(heads, dk, dr, dv) + self.attention_cycles(t, heads, dk, dr, dv)


LANE_MUL_LATENCY = 3    # lane multiplier: operand registers, two half products, their sum (hw/mla_passes.py)
SCORE_DRAIN = 7 + LANE_MUL_LATENCY      # + adder tree of 8 or 16 lanes, pass switches (measured)
CTX_DRAIN = 12 + LANE_MUL_LATENCY       # + ApplyMant, q buffer write and read to the last output beat (measured)
RECIP_LATENCY = 5   # hw.lib.lut.Recip.LATENCY: the reciprocals of sum e, once per position after chunk 0
