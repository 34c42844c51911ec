"""The dequant + MAC array: INT4 matvecs straight out of the banked weight store, results in X.

Arithmetic (``nano_k3.fxp_ops.matvec`` = ``X.fit(int4.dequant_matvec(m, q, s, z, g), m_frac + ACC_FRAC)``,
or ``LOGIT.fit`` for the LM head as in ``FixedModel.step``), exact until the one final rounding:

    y[c] = Σ_g s[g,c] · Σ_{k∈g} (q[k,c] − z[g,c])·m[k]        (s, z once per group per column)

The zero point comes off each nibble before its multiply (q − z in −15..15, a 5-bit signed factor), so a
lane keeps one group sum and no Σm, and no lane multiplies a group sum by z.

``m`` are MAC-input mantissas (``fxp_ops.A``) with one shared exponent ``frac``
(``fxp_ops.mac_input``); every width below is derived from ``fxp_ops`` / ``hw.params`` bounds at
construction, so the accumulators cannot overflow for any legal input.

Organisation. ``W = 16·banks`` lanes; one read of the store (``banks`` consecutive beats = ``W``
consecutive bytes of the row-major ``.q`` array ``[fan_in/2, fan_out]``) per cycle. Lane ``c`` owns byte
``c`` of the read: two input rows (low/high nibble) of one output column.
* ``fan_out ≥ W``: a read is one row pair × ``W`` columns; the array loops column blocks (outer) ×
  groups × row pairs, and each block's ``W`` results leave together.
* ``fan_out < W`` ("fold"): a read holds ``F = W/fan_out`` row pairs (fewer if a group has fewer:
  ``F = min(W/fan_out, group/2)``; lanes past the group are masked to x = 0); lane ``c`` takes row
  pair ``r0 + c // fan_out`` and column ``c % fan_out``. The per-lane group sums
  ``d = Σ(q − z)·x`` of lanes with the same column are added in a fold tree before the scale.
Per (block, group) the sequencer reads the zero points (1 read), then the q beats, then the scales
(1 read, 2 when the block has ``W`` columns); their holding registers are timed so that the next
group's reads land only after this group has used them (z while its q beats pass D; s is copied into
S4's ring when the group enters S4), so back-to-back groups and matvecs flow without bubbles.

Activations. ``act`` fills a register file of ``max_fan_in/2`` pairs (the one array here that is
not an msh_sram: every pair can be needed by some lane in one cycle, up to ``W`` values per cycle).
A window of up to ``W/min_fan_out`` consecutive pairs, aligned to its size, is selected per read (a
``P:1`` mux only for slot 0; slot j > 0 chooses among ``P/2^bitlen(j)`` pairs), then each block of
``min_fan_out`` lanes picks its slot (``≤ log2 W`` choices).

Ports.
* ``w``, ``r_cmd`` → ``r_data``: the weight store's write and parameter-read streams (hw.weight_store).
* ``act`` (In stream ``{m[act_lanes], frac, last}``): mantissas in order from element 0, ``act_lanes``
  per transfer; ``frac`` (the vector's exponent) is taken with ``last``. Accepted while no matvec is
  being issued; commands are held off while a vector is partly loaded.
* ``i`` (In stream, matvec command ``{q_beat, s_beat, z_beat, fan_in, fan_out_log2, group_log2,
  fmt}``): store beat indices of the tensor's ``.q``/``.s``/``.z`` (descriptor address − tensor base,
  / 16), fan-in, log2 fan-out, log2 of the effective group (min(group size, fan_in)), output format
  (0: ``X``, 1: ``LOGIT``). Contract: fan_out a power of two in [min_fan_out, max_fan_out], group a
  power of two ≥ 2 dividing fan_in ≤ max_fan_in, group/2 · fan_out ≥ 16 (each group is whole beats).
* ``o`` (Out stream ``{y[out_lanes], count, last}``): results in column order, ``out_lanes`` per
  transfer (``count`` valid, fewer only when fan_out < out_lanes), ``last`` on the matvec's final one.

Pipeline (global stall ``adv``: everything before S4 moves together; it stops when a finished group
finds S4 still busy with the previous group's steps, or S5 stops: S4 and S5 stop only when a block's
last group finds the result buffer still draining):
    I   sequencer: read address, activation window              (msh_sram read)
    D   (q − z)·x per lane: rotate (store) + slot mux + two 5×A multiplies; z (replicated to the lanes of
        its column) / s captured
    S2  group sums d per lane (the z·Σx stage S3 of the q·x form is gone: the stages keep their names)
    F1  fold levels 1..⌈log2W/2⌉     F2  remaining fold levels   (3 adds of ~35 b each at W = 64)
    S4  s·d for ``scale_lanes`` = K columns a cycle (16 × ~35 b multiplies, alone in their stage): the
        group's d and s enter two rings that shift down by K lanes a step; a group takes
        ``scale_steps`` = max(1, min(fan_out, W) / K) cycles (the fold leaves its columns in lanes 0..)
    S5  y += s·d across groups, step k into columns kK..kK + K − 1; the block's last group writes the
        result buffer, which starts draining once every chunk will be written before it is read
    R1  chunk mux + rounding constant   R2  shift by frac + 12 − fmt.frac   R3  saturate → o
Throughput: a (block, group) takes group/2 / F + 2 (+1 with W columns) cycles of the store port, or
its scale steps when they are more (only for tiny groups or few scale lanes: S4 then stalls the reads).
Latency (checked by verification/test_mac_array.py ``mac_timing``, no stalls): command taken → last
result transfer = ``issue_cycles(...) + LATENCY + max(scale_steps, chunks of the last block) − 1``, one
cycle less with ``W`` columns (the second scale read ends the issue after the last q read), so with
scale_lanes ≥ out_lanes the serial S4 adds nothing: e.g. nano at banks = 4, scale_lanes = 16: 64→2: 12,
64→8: 15, 64→16: 19, 64→32: 28, 32→64: 30, 64→64: 46, 64→128 and 128→64 (2 groups): 81, 64→512: 291
cycles. Back-to-back commands overlap: the next matvec's reads start as soon as the previous one's are
issued.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from amaranth.hdl import Array, Cat, Const, Module, Mux, Signal, signed, unsigned
from amaranth.lib import stream, wiring
from amaranth.lib.data import ArrayLayout, StructLayout
from amaranth.lib.wiring import In, Out

from hw.params import NIBBLE_BITS, ChipParams, require_instance, signed_bits
from hw.weight_store import BEAT_BYTES, WeightStore, WeightStoreParams, WeightReadPort, read_cmd_layout, \
    read_data_layout, write_layout
from nano_k3 import fxp_ops
from nano_k3.int4 import SCALE_FRAC

SCALE_BITS = 16            # .s is int16 Q3.12 (SPEC §4.3)
ZERO_BITS = NIBBLE_BITS    # .z values 0..15 (SPEC §4.3); the low nibble of each uint8
Q, Z, S0, S1 = range(4)    # kinds of store reads


def _is_pow2(v: object) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v >= 1 and not v & (v - 1)


def _log2(v: int) -> int:
    return v.bit_length() - 1


@dataclass(frozen=True)
class MacArrayParams:
    """Parameters of one MAC array build (new: report for merging into hw.params)."""

    store: WeightStoreParams = WeightStoreParams()
    max_fan_in: int = 128      # activation register file (nano: mla.wk_c / wv have fan-in dc = 128)
    max_fan_out: int = 512     # nano: the LM head
    min_fan_out: int = 2       # nano: kda.b
    act_lanes: int = 4         # activation elements per ``act`` transfer
    out_lanes: int = 16        # results per ``o`` transfer
    scale_lanes: int = 16      # s·d multipliers (S4): columns scaled per cycle

    def __post_init__(self) -> None:
        if not isinstance(self.store, WeightStoreParams):
            raise TypeError(f"store must be a WeightStoreParams, got {self.store!r}")
        for name in ("max_fan_in", "max_fan_out", "min_fan_out", "act_lanes", "out_lanes"):
            v = getattr(self, name)
            if not _is_pow2(v) or v > 1 << 16:
                raise ValueError(f"{name} must be a power of two in 1..65536, got {v!r}")
        if self.max_fan_in < 2:
            raise ValueError(f"max_fan_in must be at least 2 (two int4 rows per byte), got {self.max_fan_in}")
        if self.min_fan_out > self.max_fan_out:
            raise ValueError(f"min_fan_out={self.min_fan_out} exceeds max_fan_out={self.max_fan_out}")
        if not 2 <= self.act_lanes <= self.max_fan_in:
            raise ValueError(f"act_lanes must be in 2..max_fan_in={self.max_fan_in}, got {self.act_lanes}")
        if self.out_lanes > self.lanes:
            raise ValueError(f"out_lanes={self.out_lanes} exceeds the array's {self.lanes} lanes")
        if not _is_pow2(self.scale_lanes) or self.scale_lanes > self.lanes:
            raise ValueError(f"scale_lanes must be a power of two in 1..lanes={self.lanes}, got {self.scale_lanes!r}")

    # Geometry -------------------------------------------------------------------------------------
    @property
    def lanes(self) -> int:
        return BEAT_BYTES * self.store.banks

    @property
    def pairs(self) -> int:
        return self.max_fan_in // 2

    @property
    def window(self) -> int:
        """Activation pairs one read can need: W/min_fan_out, at most a group's (≤ max_fan_in/2)."""
        return max(1, min(self.lanes // self.min_fan_out, self.pairs))

    # Number formats (fxp_ops, read at construction) -----------------------------------------------
    @property
    def widths(self) -> ChipParams:
        """Exact accumulator widths of hw.params for int-A activations over max_fan_in rows."""
        return ChipParams(name="mac_array", act_bits=fxp_ops.A.bits, scale_bits=SCALE_BITS,
                          scale_frac=SCALE_FRAC, max_fan_in=max(2, self.max_fan_in))

    @property
    def frac_range(self) -> tuple[int, int]:
        """Exponents mac_input gives an X vector: X.frac − (X.bits − A.bits + 1) .. MAC_FRAC_MAX."""
        X, A = fxp_ops.X, fxp_ops.A
        return X.frac - max(0, X.bits - A.bits + 1), fxp_ops.MAC_FRAC_MAX

    @property
    def out_fmts(self) -> tuple[fxp_ops.Fmt, fxp_ops.Fmt]:
        return fxp_ops.X, fxp_ops.LOGIT

    @property
    def shift_range(self) -> tuple[int, int]:
        lo, hi = self.frac_range
        fr = [f.frac for f in self.out_fmts]
        return lo + fxp_ops.ACC_FRAC - max(fr), hi + fxp_ops.ACC_FRAC - min(fr)

    @property
    def out_bits(self) -> int:
        return max(f.bits for f in self.out_fmts)

    # Performance model ----------------------------------------------------------------------------
    def scale_steps(self, fan_out: int) -> int:
        """S4 cycles of one (block, group): the block's min(fan_out, W) columns, scale_lanes a cycle."""
        return max(1, min(fan_out, self.lanes) // self.scale_lanes)

    def issue_cycles(self, fan_in: int, fan_out: int, group: int) -> int:
        """Store-port cycles of one matvec (= cycles between back-to-back commands): a (block, group)
        holds the port for its reads, or for its scale steps when they are more (tiny groups)."""
        W = self.lanes
        F = 1 if fan_out >= W else min(W // fan_out, group // 2)
        blocks = max(1, fan_out // W)
        s_reads = 2 if min(fan_out, W) == W else 1
        return blocks * (fan_in // group) * max((group // 2) // F + 1 + s_reads, self.scale_steps(fan_out))


def act_layout(p: MacArrayParams) -> StructLayout:
    lo, hi = p.frac_range
    return StructLayout({"m": ArrayLayout(signed(fxp_ops.A.bits), p.act_lanes),
                         "frac": signed(signed_bits(lo, hi)), "last": unsigned(1)})


def cmd_layout(p: MacArrayParams) -> StructLayout:
    bb = p.store.beat_bits
    return StructLayout({
        "q_beat": unsigned(bb), "s_beat": unsigned(bb), "z_beat": unsigned(bb),
        "fan_in": unsigned(p.max_fan_in.bit_length()),
        "fan_out_log2": unsigned(max(1, _log2(p.max_fan_out).bit_length())),
        "group_log2": unsigned(max(1, _log2(p.max_fan_in).bit_length())),
        "fmt": unsigned(1),
    })


def out_layout(p: MacArrayParams) -> StructLayout:
    return StructLayout({"y": ArrayLayout(signed(p.out_bits), p.out_lanes),
                         "count": unsigned(p.out_lanes.bit_length()), "last": unsigned(1)})


class MacArray(wiring.Component):
    """Weight store + INT4 dequant-MAC array (see the module docstring)."""

    LATENCY = 9    # command -> last result, beyond the store-port cycles (see the module docstring)

    def __init__(self, params: MacArrayParams):
        require_instance(self, params, MacArrayParams)
        self.params = p = params
        super().__init__({
            "w": In(stream.Signature(write_layout(p.store))),
            "r_cmd": In(stream.Signature(read_cmd_layout(p.store))),
            "r_data": Out(stream.Signature(read_data_layout(p.store))),
            "act": In(stream.Signature(act_layout(p))),
            "i": In(stream.Signature(cmd_layout(p))),
            "o": Out(stream.Signature(out_layout(p))),
            "busy": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        p, wd = self.params, self.params.widths
        W, LW, NB = p.lanes, _log2(p.lanes), p.store.banks
        A = fxp_ops.A
        abits = A.bits

        store = m.submodules.store = WeightStore(p.store)
        wiring.connect(m, wiring.flipped(self.w), store.w)
        wiring.connect(m, wiring.flipped(self.r_cmd), store.i)
        wiring.connect(m, store.o, wiring.flipped(self.r_data))
        port = store.r

        adv = Signal()          # the main pipeline (I .. S5) moves this cycle

        # ---- activation register file ------------------------------------------------------------
        P = p.pairs
        pair_a = [Signal(signed(abits), name=f"act{2 * k}") for k in range(P)]
        pair_b = [Signal(signed(abits), name=f"act{2 * k + 1}") for k in range(P)]
        frac = Signal(act_layout(p).members["frac"])
        act_ptr = Signal(range(max(2, p.max_fan_in // p.act_lanes)))    # transfer index in the vector
        active = Signal()
        m.d.comb += self.act.ready.eq(~active)
        per = p.act_lanes // 2
        with m.If(self.act.valid & self.act.ready):
            m.d.sync += act_ptr.eq(Mux(self.act.payload.last, 0, act_ptr + 1))
            with m.If(self.act.payload.last):
                m.d.sync += frac.eq(self.act.payload.frac)
            for k in range(P):
                with m.If(act_ptr == k // per):
                    m.d.sync += [pair_a[k].eq(self.act.payload.m[2 * (k % per)]),
                                 pair_b[k].eq(self.act.payload.m[2 * (k % per) + 1])]

        # ---- sequencer (stage I) ------------------------------------------------------------------
        bb = p.store.beat_bits
        c = self.i.payload
        n_w = cmd_layout(p).members["fan_out_log2"]
        sh_lo, sh_hi = p.shift_range
        r_n, r_ls, r_fl, r_wlog, r_vb = (Signal(range(_log2(p.max_fan_out) + 2 + LW), name=nm)
                                         for nm in ("n", "lane_shift", "fold_log", "wlog", "vb_log"))
        r_gmask = Signal(range(P + 1))            # pairs per group − 1
        r_half = Signal(range(P + 1))             # pairs per block (fan_in / 2)
        r_s2 = Signal()                           # the block's scales need two reads
        r_blocks_m1 = Signal(range(max(2, p.max_fan_out // W + 1)))
        r_qinc = Signal(bb + 1)
        r_sbase, r_zbase = Signal(bb), Signal(bb)
        r_sh = Signal(signed(signed_bits(sh_lo, sh_hi)))
        r_fmt = Signal()
        r_colw = Signal(range(p.max_fan_out + 1))  # N (element step of s/z per group)

        phase = Signal(2)
        r0 = Signal(range(P + 1))
        qa, qblk = Signal(bb), Signal(bb)
        szcol, szblk = Signal(range(p.max_fan_out * (p.max_fan_in // 2 + 1))), Signal(range(p.max_fan_out + W + 1))
        blk = Signal.like(r_blocks_m1)
        gfirst, bfirst, blk_end = Signal(), Signal(), Signal()

        m.d.comb += self.i.ready.eq(~active & (act_ptr == 0) & ~self.act.valid)
        with m.If(self.i.valid & self.i.ready):
            n = c.fan_out_log2
            glog = c.group_log2
            fold = n < LW
            fl = Signal(range(LW + 1))
            gp_log = Signal.like(glog)             # log2 of the pairs per group
            m.d.comb += [gp_log.eq(glog - 1), fl.eq(Mux(fold, Mux(LW - n < gp_log, LW - n, gp_log), 0))]
            fr = [f.frac for f in p.out_fmts]
            m.d.sync += [
                active.eq(1), phase.eq(Z), r0.eq(0), qa.eq(c.q_beat), qblk.eq(c.q_beat),
                szcol.eq(0), szblk.eq(0), blk.eq(0), gfirst.eq(1), bfirst.eq(1),
                r_n.eq(n), r_ls.eq(Mux(fold, n, LW)), r_fl.eq(fl), r_wlog.eq(Mux(fold, n, LW)),
                r_vb.eq(Mux(fl + n < LW, fl + n, LW)),
                r_gmask.eq((Const(1, P.bit_length() + 1) << gp_log) - 1), r_half.eq(c.fan_in >> 1),
                r_s2.eq(~fold), r_blocks_m1.eq(Mux(fold, 0, ((Const(1, n_w.width + 12) << n) >> LW) - 1)),
                r_qinc.eq((Const(1, bb + 1) << (fl + n)) >> 4),
                r_sbase.eq(c.s_beat), r_zbase.eq(c.z_beat), r_fmt.eq(c.fmt),
                r_sh.eq(frac + fxp_ops.ACC_FRAC - Mux(c.fmt, fr[1], fr[0])),
                r_colw.eq(Const(1, p.max_fan_out.bit_length()) << n),
            ]

        # tags of the read issued this cycle, registered into stage D with the read
        step = Signal(range(P + 1))
        next_r0 = Signal(range(2 * P + 1))
        g_last, b_last = Signal(), Signal()
        m.d.comb += [step.eq(Const(1, P.bit_length() + 1) << r_fl), next_r0.eq(r0 + step),
                     g_last.eq((next_r0 & r_gmask) == 0), b_last.eq(next_r0 == r_half)]
        rd_beat = Signal(bb)
        with m.Switch(phase):
            with m.Case(Q):
                m.d.comb += rd_beat.eq(qa)
            with m.Case(Z):
                m.d.comb += rd_beat.eq(r_zbase + (szcol >> 4))
            with m.Case(S0):
                m.d.comb += rd_beat.eq(r_sbase + (szcol >> 3))
            with m.Case(S1):
                m.d.comb += rd_beat.eq(r_sbase + (szcol >> 3) + NB)
        m.d.comb += [port.en.eq(active & adv), port.beat.eq(rd_beat)]

        with m.If(active & adv):
            with m.Switch(phase):
                with m.Case(Z):
                    m.d.sync += phase.eq(Q)
                with m.Case(Q):
                    m.d.sync += [qa.eq(qa + r_qinc), r0.eq(next_r0), gfirst.eq(g_last)]
                    with m.If(g_last):
                        m.d.sync += [phase.eq(S0), blk_end.eq(b_last)]
                with m.Case(S0, S1):
                    done = Signal()
                    m.d.comb += done.eq((phase == S1) | ~r_s2)
                    with m.If(~done):
                        m.d.sync += phase.eq(S1)
                    with m.Else():
                        m.d.sync += [phase.eq(Z), bfirst.eq(blk_end)]
                        with m.If(~blk_end):
                            m.d.sync += szcol.eq(szcol + r_colw)
                        with m.Elif(blk == r_blocks_m1):
                            m.d.sync += active.eq(0)
                        with m.Else():
                            m.d.sync += [blk.eq(blk + 1), szcol.eq(szblk + W), szblk.eq(szblk + W),
                                         qblk.eq(qblk + NB), qa.eq(qblk + NB), r0.eq(0)]

        # activation window: slot j = pair r0 + j (r0 is a multiple of the window size 2^fold_log > j)
        S = p.window
        win_a = [Signal(signed(abits), name=f"win{j}_a") for j in range(S)]
        win_b = [Signal(signed(abits), name=f"win{j}_b") for j in range(S)]
        for j in range(S):
            bl = j.bit_length()
            idx = r0 >> bl
            opts = list(range(j, P, 1 << bl))
            with m.If(adv):
                m.d.sync += [win_a[j].eq(Array(pair_a[k] for k in opts)[idx]),
                             win_b[j].eq(Array(pair_b[k] for k in opts)[idx])]

        # stage D registers (the read data itself sits in the macros' output registers)
        vD = Signal()
        kD, gfD, glD = Signal(2), Signal(), Signal()
        lsD, vbD, wlogD = Signal.like(r_ls), Signal.like(r_vb), Signal.like(r_wlog)
        offD = Signal(4)
        gtag = StructLayout({"bfirst": 1, "blast": 1, "last": 1, "wlog": r_wlog.shape(),
                             "sh": r_sh.shape(), "fmt": 1})
        gtD = Signal(gtag)
        with m.If(adv):
            m.d.sync += [vD.eq(active), kD.eq(phase), gfD.eq(gfirst), glD.eq(g_last), lsD.eq(r_ls),
                         vbD.eq(r_vb), wlogD.eq(r_wlog),
                         offD.eq(Mux(phase == Z, szcol[:4], Cat(Const(0, 1), szcol[:3]))),
                         gtD.bfirst.eq(bfirst), gtD.blast.eq(b_last), gtD.last.eq(b_last & (blk == r_blocks_m1)),
                         gtD.wlog.eq(r_wlog), gtD.sh.eq(r_sh), gtD.fmt.eq(r_fmt)]
        m.d.comb += [port.lock.eq(active | vD), self.busy.eq(active | vD)]

        # ---- stage D: products ---------------------------------------------------------------------
        flat = Signal(W * 8)
        m.d.comb += flat.eq(Cat(*[port.data[j] for j in range(NB)]))
        isq = vD & (kD == Q)
        kmin = _log2(p.min_fan_out)
        nblk = W >> kmin                       # lane blocks sharing one slot in every mode
        xa_blk = [Signal(signed(abits), name=f"xa_blk{u}") for u in range(nblk)]
        xb_blk = [Signal(signed(abits), name=f"xb_blk{u}") for u in range(nblk)]
        for u in range(nblk):
            with m.Switch(lsD):
                for k in range(kmin, LW + 1):
                    slot = (u << kmin) >> k
                    with m.Case(k):
                        if slot < S:
                            m.d.comb += [xa_blk[u].eq(win_a[slot]), xb_blk[u].eq(win_b[slot])]
        # z / s capture (sub-beat offsets only occur when the block is narrower than one beat). A group's
        # z read comes before its q beats, so z_hold holds this group's zero points while its beats pass D;
        # lane ln takes the zero point of its column, ln mod 2^wlog (lanes of one column share it).
        z_hold = [Signal(ZERO_BITS, name=f"z_hold{ln}") for ln in range(W)]
        s_hold = [Signal(signed(SCALE_BITS), name=f"s_hold{ln}") for ln in range(W)]
        beat0 = Signal(8 * BEAT_BYTES)
        m.d.comb += beat0.eq(port.data[0] >> (offD * 8))
        z_byte = [(beat0 if j < BEAT_BYTES else flat)[8 * j:8 * j + ZERO_BITS] for j in range(W)]
        with m.If(adv & vD & (kD == Z)):
            with m.Switch(wlogD):
                for k in range(LW + 1):
                    with m.Case(k):
                        m.d.sync += [z_hold[ln].eq(z_byte[ln % (1 << k)]) for ln in range(W)]
        half = W // 2
        with m.If(adv & vD & (kD == S0)):
            for ln in range(half):
                src = beat0 if 2 * ln < BEAT_BYTES else flat
                m.d.sync += s_hold[ln].eq(src[16 * ln:16 * ln + 16])
        with m.If(adv & vD & (kD == S1)):
            for ln in range(half):
                m.d.sync += s_hold[half + ln].eq(flat[16 * ln:16 * ln + 16])

        # (q − z)·x per weight: the zero point comes off the nibble (−15..15), so a lane's group sum is d
        # itself and no lane keeps Σx or multiplies it by z
        qx1 = [Signal(signed(wd.beat_d_bits), name=f"qx1_{ln}") for ln in range(W)]
        v1, gf1, gl1 = Signal(), Signal(), Signal()
        gt1 = Signal(gtag)
        with m.If(adv):
            m.d.sync += [v1.eq(isq), gf1.eq(gfD), gl1.eq(glD), gt1.eq(gtD)]
        for ln in range(W):
            ok = (Const(ln, LW + 1) >> vbD) == 0
            xa = Mux(ok, xa_blk[ln >> kmin], 0)
            xb = Mux(ok, xb_blk[ln >> kmin], 0)
            dq = [Signal(signed(ZERO_BITS + 1), name=f"dq{h}_{ln}") for h in range(2)]   # q − z, low / high
            m.d.comb += [dq[h].eq(flat[8 * ln + 4 * h:8 * ln + 4 * h + 4] - z_hold[ln]) for h in range(2)]
            with m.If(adv):
                m.d.sync += qx1[ln].eq(dq[0] * xa + dq[1] * xb)

        # ---- S2: group sums d = Σ (q − z)·x ----------------------------------------------------------
        acc = [Signal(signed(wd.group_d_bits), name=f"acc_d{ln}") for ln in range(W)]
        v2 = Signal()
        gt2 = Signal(gtag)
        with m.If(adv):
            m.d.sync += [v2.eq(v1 & gl1)]
            with m.If(v1):
                m.d.sync += gt2.eq(gt1)
                for ln in range(W):
                    m.d.sync += acc[ln].eq(Mux(gf1, 0, acc[ln]) + qx1[ln])

        # ---- F1, F2: fold lanes of the same column (level l adds lane c + W/2^l into c) ------------
        def fold(src, levels, wlog, name):
            cur = list(src)
            for lv in levels:
                h = W >> lv
                nxt = []
                for ln in range(W):
                    if ln < h:
                        s_ = Signal(signed(wd.group_d_bits), name=f"{name}_l{lv}_{ln}")
                        m.d.comb += s_.eq(Mux(wlog <= LW - lv, cur[ln] + cur[ln + h], cur[ln]))
                        nxt.append(s_)
                    else:
                        nxt.append(cur[ln])
                cur = nxt
            return cur
        l1 = (LW + 1) // 2
        f1 = [Signal(signed(wd.group_d_bits), name=f"f1_{ln}") for ln in range(W)]
        f2 = [Signal(signed(wd.group_d_bits), name=f"f2_{ln}") for ln in range(W)]
        v4, v5, v6 = Signal(), Signal(), Signal()
        gt4, gt5, gt6 = Signal(gtag), Signal(gtag), Signal(gtag)
        with m.If(adv):
            m.d.sync += [v4.eq(v2), gt4.eq(gt2)]
            m.d.sync += [a.eq(b) for a, b in zip(f1, fold(acc, range(1, l1 + 1), gt2.wlog, "fa"))]

        # ---- S4: scale once per group, K = scale_lanes columns a step -----------------------------
        # A group enters S4 whole: f2 from the fold tree and s4 from s_hold (the next group's scale
        # reads may land there before this group's last step). Both are rings that shift down by K
        # lanes a step; the K multipliers read lanes 0..K−1. The fold leaves a block's 2^wlog valid
        # columns in lanes 0..2^wlog − 1, so a group takes max(1, 2^wlog / K) steps.
        K, LK = p.scale_lanes, _log2(p.scale_lanes)
        s4 = [Signal(signed(SCALE_BITS), name=f"s4_{ln}") for ln in range(W)]
        st = Signal(range(max(2, W // K)))    # the step S4 does this cycle
        s_last = Signal()                     # ... is its group's last
        m.d.comb += s_last.eq(((st + 1) << LK) >= (Const(1, W.bit_length() + 1) << gt5.wlog))
        y_busy = Signal()                     # the result buffer holds a block that has not left yet
        st6 = Signal.like(st)
        sadv = Signal()                       # S4 and S5 move this cycle
        # S5 waits while a block's last group finds the result buffer still draining (at its first step);
        # the stages before S4 wait while a finished group in F2 finds S4 busy with the group ahead
        m.d.comb += [sadv.eq(~(v6 & gt6.blast & (st6 == 0) & y_busy)), adv.eq(sadv & ~(v4 & v5 & ~s_last))]
        with m.If(adv & v4):
            m.d.sync += [v5.eq(1), gt5.eq(gt4), st.eq(0)]
            m.d.sync += [a.eq(b) for a, b in zip(f2, fold(f1, range(l1 + 1, LW + 1), gt4.wlog, "fb"))]
            m.d.sync += [a.eq(b) for a, b in zip(s4, s_hold)]
        with m.Elif(sadv & v5):
            with m.If(s_last):
                m.d.sync += [v5.eq(0), st.eq(0)]
            with m.Else():
                m.d.sync += st.eq(st + 1)
                m.d.sync += [f2[ln].eq(f2[ln + K]) for ln in range(W - K)]
                m.d.sync += [s4[ln].eq(s4[ln + K]) for ln in range(W - K)]
        sd = [Signal(signed(wd.out_bits), name=f"sd{j}") for j in range(K)]
        with m.If(sadv):
            m.d.sync += [v6.eq(v5), gt6.eq(gt5), st6.eq(st)]
            m.d.sync += [sd[j].eq(s4[j] * f2[j]) for j in range(K)]

        # ---- S5: accumulate across groups; the block's last group fills the result buffer ------------
        # Step k of a group adds its K products into columns kK .. kK + K − 1. The result buffer starts
        # draining (one out_lanes chunk a cycle) after the last group's step max(0, steps − chunks), so
        # every chunk is written before it is read and the last one leaves right after the last step.
        yacc = [Signal(signed(wd.out_bits), name=f"yacc{ln}") for ln in range(W)]
        y_out = [Signal(signed(wd.out_bits), name=f"y_out{ln}") for ln in range(W)]
        y_tag = Signal(gtag)
        y_done = Signal()                   # the result buffer's last chunk leaves this cycle
        n_steps = W // K
        total = [Signal(signed(wd.out_bits), name=f"total{j}") for j in range(K)]
        for j in range(K):
            prev = Array(yacc[k * K + j] for k in range(n_steps))[st6] if n_steps > 1 else yacc[j]
            m.d.comb += total[j].eq(Mux(gt6.bfirst, 0, prev) + sd[j])
        with m.If(sadv & v6):
            with m.Switch(st6):
                for k in range(n_steps):
                    with m.Case(k):
                        with m.If(gt6.blast):
                            m.d.sync += [y_out[k * K + j].eq(total[j]) for j in range(K)]
                        with m.Else():
                            m.d.sync += [yacc[k * K + j].eq(total[j]) for j in range(K)]
            with m.If(gt6.blast & (st6 == 0)):
                m.d.sync += y_tag.eq(gt6)

        # ---- R1..R3: requantise out_lanes results per transfer ------------------------------------
        OL = p.out_lanes
        n_chunks = W // OL
        y_fill = Signal()                   # S5's step lets the result buffer start draining
        fill = [max(0, p.scale_steps(1 << k) - max(1, (1 << k) // OL)) for k in range(LW + 1)]
        m.d.comb += y_fill.eq(st6 == Array(Const(j, st6.shape()) for j in fill)[gt6.wlog])
        chunk = Signal(range(max(2, n_chunks)))
        last_chunk = Signal()
        m.d.comb += last_chunk.eq(((chunk + 1) << _log2(OL)) >= (Const(1, W.bit_length() + 1) << y_tag.wlog))
        adv_o = Signal()
        m.d.comb += adv_o.eq(~self.o.valid | self.o.ready)
        m.d.comb += y_done.eq(y_busy & adv_o & last_chunk)
        with m.If(sadv & v6 & gt6.blast & y_fill):
            m.d.sync += y_busy.eq(1)
        with m.Elif(y_done):
            m.d.sync += y_busy.eq(0)
        with m.If(y_busy & adv_o):
            m.d.sync += chunk.eq(Mux(last_chunk, 0, chunk + 1))

        ybits = wd.out_bits
        lmax = max(0, -sh_lo)
        r1 = [Signal(signed(ybits + 1), name=f"r1_{j}") for j in range(OL)]
        r2 = [Signal(signed(ybits + 1 + lmax), name=f"r2_{j}") for j in range(OL)]
        ov1, ov2 = Signal(), Signal()
        ot = StructLayout({"count": unsigned(OL.bit_length()), "last": 1, "sh": r_sh.shape(), "fmt": 1})
        ot1, ot2 = Signal(ot), Signal(ot)
        sh_pos = Signal(range(max(2, sh_hi + 1)))
        m.d.comb += sh_pos.eq(Mux(y_tag.sh > 0, y_tag.sh, 0))
        sh_m1 = Signal.like(sh_pos)
        rnd = Signal(ybits + 1)
        m.d.comb += [sh_m1.eq(sh_pos - 1), rnd.eq(Mux(y_tag.sh > 0, Const(1, ybits + 1) << sh_m1, 0))]
        with m.If(adv_o):
            m.d.sync += [ov1.eq(y_busy), ov2.eq(ov1), self.o.valid.eq(ov2), ot2.eq(ot1)]
            m.d.sync += [ot1.count.eq(Mux(y_tag.wlog < _log2(OL), Const(1, OL.bit_length()) << y_tag.wlog, OL)),
                         ot1.last.eq(y_tag.last & last_chunk), ot1.sh.eq(y_tag.sh), ot1.fmt.eq(y_tag.fmt)]
            for j in range(OL):
                sel = Array(y_out[k * OL + j] for k in range(n_chunks))[chunk] if n_chunks > 1 else y_out[j]
                m.d.sync += r1[j].eq(sel + rnd)
            # R2: shift by sh (right, rounding already added) or left by −sh
            shr = Signal(range(max(2, sh_hi + 1)))
            shl = Signal(range(max(2, lmax + 1)))
            m.d.comb += [shr.eq(Mux(ot1.sh > 0, ot1.sh, 0)), shl.eq(Mux(ot1.sh < 0, -ot1.sh, 0))]
            for j in range(OL):
                m.d.sync += r2[j].eq(Mux(ot1.sh > 0, r1[j] >> shr, r1[j] << shl))
            # R3: saturate to the output format
            fx, fl_ = p.out_fmts
            lo = Mux(ot2.fmt, fl_.lo, fx.lo)
            hi = Mux(ot2.fmt, fl_.hi, fx.hi)
            m.d.sync += [self.o.payload.count.eq(ot2.count), self.o.payload.last.eq(ot2.last)]
            for j in range(OL):
                m.d.sync += self.o.payload.y[j].eq(Mux(r2[j] < lo, lo, Mux(r2[j] > hi, hi, r2[j])))
        return m


# ---- build registry hooks (rtl_gen.emit BLOCKS entry) ------------------------------------------------
_BANKS = {"nano": 8, "tiny": 2}     # lane groups per preset: nano 128 lanes, tiny 32 (fast simulation)


EMB_RECORDS = ("emb.q", "emb.s", "emb.z")    # the image's first records (SPEC §4): the embedding table


def store_block(cfg, group: int) -> tuple[int, int, int]:
    """(table, first, end) byte addresses in the image of ``cfg`` at ``group``: the embedding table's start,
    the first record after it and the token array. The weight store holds first .. end; the chip reads
    only its tokens' embedding rows from the table, one position at a time (hw/emb_fetch.py), never
    the whole table."""
    from nano_k3.image import plan_layout
    lay = plan_layout(cfg.with_group(group), 1)
    names = [d.name for d in lay.descriptors[:len(EMB_RECORDS)]]
    if tuple(names) != EMB_RECORDS:
        raise ValueError(f"the image's first records must be {EMB_RECORDS}, got {names}")
    return lay.descriptors[0].addr, lay.descriptors[len(EMB_RECORDS)].addr, lay.tokens_addr


def emb_table_bytes(cfg) -> int:
    """Bytes of the embedding table (with its padding) at the larger of the two group sizes."""
    return max(first - table for table, first, _ in (store_block(cfg, g) for g in (64, 128)))


def mac_array_params_for(chip: ChipParams) -> MacArrayParams:
    """The MAC array of a chip build: sizes from the model of the same name (both group sizes)."""
    from nano_k3.config import PRESETS
    from nano_k3.tensors import MatSpec, tensor_specs
    if chip.name not in PRESETS or chip.name not in _BANKS:
        raise ValueError(f"no MAC array preset for chip {chip.name!r}; known: {sorted(_BANKS)}")
    cfg = PRESETS[chip.name]
    mats = [s for s in tensor_specs(cfg) if isinstance(s, MatSpec) and not s.emb]
    beats = max((end - first) // BEAT_BYTES for _, first, end in (store_block(cfg, g) for g in (64, 128)))
    pow2 = lambda v: 1 << (v - 1).bit_length()      # noqa: E731
    return MacArrayParams(store=WeightStoreParams(banks=_BANKS[chip.name], beats=beats),
                          max_fan_in=pow2(max(s.fan_in for s in mats)),
                          max_fan_out=pow2(max(s.fan_out for s in mats)),
                          min_fan_out=min(s.fan_out for s in mats))


def mac_array_block(chip: ChipParams) -> MacArray:
    return MacArray(mac_array_params_for(chip))


def mac_array_derived(chip: ChipParams) -> dict:
    p = mac_array_params_for(chip)
    wd = p.widths
    return {"mac_array": {**{k: v for k, v in dataclasses.asdict(p).items() if k != "store"},
                          "lanes": p.lanes, "window": p.window, "latency": MacArray.LATENCY,
                          "scale_steps": p.scale_steps(p.max_fan_out)},
            "store": {**dataclasses.asdict(p.store), "depth": p.store.depth, "beat_bits": p.store.beat_bits,
                      "sram_bits": p.store.sram_bits},
            "widths": {"beat_d": wd.beat_d_bits, "group_d": wd.group_d_bits, "out": wd.out_bits},
            "frac_range": list(p.frac_range), "shift_range": list(p.shift_range)}
