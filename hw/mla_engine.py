"""The MLA attention engine: KV cache in msh_sram, scores, base-2 softmax and context, all heads at once.

Reference: ``nano_k3.fixed.mla_attention`` on the growing cache (FixedModel._mla), bit for bit.
The latent c = RN(h Wc, knorm) is the vector unit's RMSNorm (hw/vector_unit.py); the matvecs run
in the MAC array. This engine takes, per position t, the X vectors q (H x (dk+dr)), kc (H x dk),
the shared kr (dr) and v (H x dv), appends k and v to the cache and returns ctx (H x dv, X).

Input ``i`` (one beat = ``lanes`` X elements, ``pos`` read on the first beat of a position), beats in
this order, each segment padded to whole beats (lanes past the segment's end are ignored):
    for h: qc_h (ceil(dk/L) beats), qr_h (ceil(dr/L));  for h: kc_h (ceil(dk/L));  kr (ceil(dr/L));
    for h: v_h (ceil(dv/L)).
Positions must come in order 0, 1, ..., t (a new sequence restarts at 0): position t reads cache
rows 0..t only, all written in this sequence, so the result never depends on SRAM power-up state.
Runtime dims ``heads``, ``dk``, ``dr``, ``dv`` (1..build maxima) and ``score_const`` =
``mla_score_const(dk + dr)`` are static inputs (header registers), stable while the engine runs.

Output ``o``: per head, ceil(dv/L) beats of ``lanes`` X elements (lanes past dv read 0);
``last`` on the final beat of the final head. ``busy``: a position is under way (low only while
waiting for the first beat of the next position).

Storage (msh_sram, SPEC §5): the cache keeps k and v, not the latent, so nothing is re-expanded. It is
split into one bank per head, so that every head reads a word in every cycle: bank h (``kv_cache_<h>``)
holds per position a row of kc_h (ceil(dk/L) words) then v_h (ceil(dv/L)), rows ceil(max_dk/L) +
ceil(max_dv/L) words apart; kr (ceil(dr/L) words), shared by the heads, is stored once, in a region of
bank 0 after its rows. Words are L x X.bits. Nano (H 2, dk 32, dr 16, dv 32, L 16, X 32 bits, 64
positions): 320 + 256 words x 512 bits = 294,912 bits (the reference's per-head broadcast kr would cost
327,680; caching the latent c + kr instead, 144 values, would need the MAC array to re-expand every
position's k and v). Per head also a q buffer (ceil(dk/L) + ceil(dr/L) words, at least ceil(dv/L):
after the score pass it holds the head's ctx beats until they are output) and a score buffer
(max_seq x T.bits): 2 x (3 x 512 + 64 x 32) bits for nano.

Datapath: per head ``lanes`` multipliers (X.bits x X.bits, three stages: operand registers, the two
half products a x b_lo and a x b_hi, their sum; mla_params.LANE_MUL_LATENCY), an adder tree and
accumulators. The stages keep the multiply out of the pass select's fan-out and the SRAM's read wires:
placed in one stage, it missed the 10 ns clock at the slow corner by 2.3 ns. In every
cycle each head reads the same word index of its own bank (a kr word is read once, from bank 0, and
meets every head's qr), so all heads advance together:
  score pass: for j in 0..t the ceil(dk/L) + ceil(dr/L) words of q_h . k_j go through products ->
    adder tree (two adder levels per register) -> word accumulator (exact) -> X.fit(dot, X.frac); the
    heads' scores of position j then take turns, one per cycle, through one x score_const (alone in
    its stage) -> T.fit -> the head's score buffer and running max (so a position takes at least H cycles).
  context pass, per L-wide chunk of v: for j in 0..t, max_h - t_j,h -> hw.lib.lut.Exp2Neg per head;
    e_j x v_j in the lane multipliers (the v read is issued late so it lands with e_j), per-lane
    accumulators and sum e (exact; summed in chunk 0 only, as it is the same for every chunk). A
    finished chunk's numerators, rounded to X.frac, move to holding registers (H x L x num_bits: 1,216
    bits for nano) and the next chunk accumulates at once, while the heads, each in L / norm_units
    cycles, go through ``norm_units`` hw.lib.lut.ApplyMant units, norm_units lanes per cycle (round,
    saturate to X), into the head's q buffer (byte strobes write the cycle's lane group). The reciprocal
    of sum e goes through one hw.lib.lut.Recip once, a head per cycle after chunk 0, and is kept per
    head for every chunk (H x 30 bits for nano). A chunk before the last lasts at least as long as its
    normalisation reads the holding registers (H L / norm_units cycles, after chunk 0 also the Recip
    latency), so that they are read before the next chunk's sums replace them.
    (An ApplyMant is ~8.6k um2 in Nangate45 and works once per chunk: nano shares 4 among 16 lanes.)
  output: the q buffers, head by head, one beat per cycle while ``o`` is ready, each beat as soon as
    its word is in the q buffer (read from the cycle after its last lane group is written): the earlier
    chunks' beats and the last chunk's earlier heads leave while the last chunk is still normalised, so
    the last beat leaves two cycles after the last normalisation write (if ceil(dv/L) <= L / norm_units).
exp2 tables: head k reads the k-th exp2 port of ``roms``; heads without one share msh_roms owned
here, two heads per ROM (its two read ports).
Latency (no stalls; MlaParams.cycles, checked by the test at every position): nano dims and build
t = 0: 63 cycles from the first input beat to the last output beat, t = 31: 206, t = 63: 366 (15 load
+ (t+1)(wk+wr) + 10 + max(t+1, H L / norm_units + 5) + (t+1) + 13 + H L / norm_units
+ (H-1) max(0, wv - L / norm_units): 5 cycles per cached position for both heads; norm_units = 16 would
save 5 cycles per position). Throughput is one q.k word or one e.v word per cycle for every head; more
lanes shorten both passes (L = 32: 245 cycles at t = 63) at the price of more multipliers.

Code: this file holds the storage, the runtime geometry and the composition; hw/mla_passes.py the
controller, the multipliers, the two passes, the normalisation and the output.
"""
from __future__ import annotations

import dataclasses
from types import SimpleNamespace

from amaranth.hdl import ClockSignal, Instance, Module, Mux, Signal, signed, unsigned
from amaranth.lib import stream, wiring
from amaranth.lib.data import ArrayLayout, StructLayout
from amaranth.lib.wiring import In, Out

from hw.mla_params import MlaParams
from hw.mla_passes import context_pass, controller, lane_multipliers, normalise, output, score_pass
from hw.params import require_instance
from hw.program import LANES
from hw.roms import ROM_DIR
from nano_k3.fxp_ops import X


def in_layout(p: MlaParams) -> StructLayout:
    return StructLayout({"data": ArrayLayout(signed(X.bits), p.lanes), "pos": unsigned(p.seq_bits)})


def out_layout(p: MlaParams) -> StructLayout:
    return StructLayout({"data": ArrayLayout(signed(X.bits), p.lanes), "last": unsigned(1)})


class _Sram:
    """One msh_sram instance (SPEC §5): write port w_*, read port r_* (data the cycle after r_en).
    ``w_strb`` (byte write enables) is all ones unless driven."""

    def __init__(self, m: Module, name: str, depth: int, width: int):
        self.addr_bits = max(1, (depth - 1).bit_length())
        self.w_en, self.r_en = Signal(name=f"{name}_w_en"), Signal(name=f"{name}_r_en")
        self.w_addr = Signal(self.addr_bits, name=f"{name}_w_addr")
        self.r_addr = Signal(self.addr_bits, name=f"{name}_r_addr")
        self.w_data = Signal(width, name=f"{name}_w_data")
        self.w_strb = Signal(width // 8, init=(1 << (width // 8)) - 1, name=f"{name}_w_strb")
        self.r_data = Signal(width, name=f"{name}_r_data")
        m.submodules[name] = Instance(
            "msh_sram", p_DEPTH=depth, p_WIDTH=width, p_ADDRW=self.addr_bits,
            i_clk=ClockSignal(), i_we=self.w_en, i_waddr=self.w_addr, i_wdata=self.w_data,
            i_wstrb=self.w_strb,
            i_re=self.r_en, i_raddr=self.r_addr, o_rdata=self.r_data)

class MlaEngine(wiring.Component):
    """MLA cache + attention (see the module docstring for ports, order and timing)."""

    def __init__(self, params: MlaParams, *, rom_dir: str = ROM_DIR, roms=None):
        """``roms``: shared-ROM ports by table name (``hw.lib.lut_rom.shared_rom``; exp2 port k serves head k),
        else the engine owns its ROMs."""
        require_instance(self, params, MlaParams)
        if not isinstance(rom_dir, str) or not rom_dir:
            self._MustUse__silence = True
            raise ValueError(f"rom_dir must be a non-empty path string, got {rom_dir!r}")
        self.params = p = params
        self.rom_dir, self.roms = rom_dir, roms
        super().__init__({
            "i": In(stream.Signature(in_layout(p))),
            "o": Out(stream.Signature(out_layout(p))),
            "heads": In(p.dim_bits),
            "dk": In(p.dim_bits),
            "dr": In(p.dim_bits),
            "dv": In(p.dim_bits),
            "score_const": In(p.c_bits),
            "busy": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        ctx = SimpleNamespace(core=self)
        for part in (_storage_and_geometry, controller, lane_multipliers, score_pass, context_pass, normalise, output):
            part(m, ctx)
        return m


def _storage_and_geometry(m: Module, ctx) -> None:
    """The k/v cache banks, q and t buffers, the runtime geometry registered from the configuration
    inputs, and the address / head-sequencing helpers the passes use."""
    core = ctx.core
    p = core.params
    L, lg, HM = p.lanes, p.lanes_log2, p.max_heads
    XB = X.bits
    head = unsigned(max(1, (HM - 1).bit_length()))     # a head index (at least one bit for the Verilog)
    seq, wb = p.seq_bits, 16        # wb: width of small word counters / offsets

    banks = [_Sram(m, f"kv_cache_{k}", p.bank_depth(k), p.word_bits) for k in range(HM)]
    qbufs = [_Sram(m, f"q_buf_{k}", p.qbuf_depth, p.word_bits) for k in range(HM)]
    tbufs = [_Sram(m, f"t_buf_{k}", p.max_seq, p.tbuf_bits) for k in range(HM)]
    addr_w = banks[0].addr_bits

    # Runtime geometry, registered from the static configuration inputs.
    H, dk, dr, dv = (Signal(p.dim_bits, name=n) for n in ("H", "dk_r", "dr_r", "dv_r"))
    wk, wr, wv, wq, ws = (Signal(wb, name=n) for n in ("wk", "wr", "wv", "wq", "ws"))
    c_r = Signal(p.c_bits)
    # ws: cycles per position of the score pass, the q.k words but at least H, since the shared
    # score scaling takes the heads' scores of a position one per cycle.
    m.d.sync += [H.eq(core.heads), dk.eq(core.dk), dr.eq(core.dr), dv.eq(core.dv), c_r.eq(core.score_const),
                 wk.eq((dk + L - 1) >> lg), wr.eq((dr + L - 1) >> lg), wv.eq((dv + L - 1) >> lg),
                 wq.eq(wk + wr), ws.eq(Mux(wk + wr > H, wk + wr, H))]

    def row(pos):                           # position pos's kc_h / v_h row in every bank
        return pos * p.row_words

    def kr_row(pos):                        # its kr in bank 0
        return p.kr_base + pos * p.words(p.max_dr)

    def head_by_head(start, name, groups_log2=0):
        """(step, valid): the heads 0 .. H-1, each in 2^groups_log2 steps, one step per cycle from the
        cycle after a ``start`` pulse; step = head << groups_log2 | group."""
        st, v = Signal(head.width + groups_log2, name=f"{name}_s"), Signal(name=f"{name}_v")
        with m.If(start):
            m.d.sync += [st.eq(0), v.eq(1)]
        with m.Elif(st == (H << groups_log2) - 1):
            m.d.sync += v.eq(0)
        with m.Elif(v):
            m.d.sync += st.eq(st + 1)
        return st, v

    t_r = Signal(seq)                       # current position
    vars(ctx).update(p=p, L=L, lg=lg, HM=HM, XB=XB, head=head, seq=seq, wb=wb, banks=banks, qbufs=qbufs,
                     tbufs=tbufs, addr_w=addr_w, H=H, dk=dk, dr=dr, dv=dv, wk=wk, wr=wr, wv=wv, wq=wq, ws=ws,
                     c_r=c_r, row=row, kr_row=kr_row, head_by_head=head_by_head, t_r=t_r)


# --- rtl_gen entry ----------------------------------------------------------------------------------
def mla_params_for(chip_params) -> MlaParams:
    """The chip's MLA engine: its model's dimensions, a VRF word (``LANES`` elements) per cache word."""
    return MlaParams.for_model(chip_params.model, LANES)


def mla_engine_block(chip_params, params: MlaParams | None = None) -> MlaEngine:
    """The block rtl_gen emits (``params``: another build for the tests)."""
    return MlaEngine(params or mla_params_for(chip_params))


def mla_engine_derived(chip_params, params: MlaParams | None = None) -> dict:
    p = params or mla_params_for(chip_params)
    return {
        "params": dataclasses.asdict(p),
        "row_words": p.row_words, "word_bits": p.word_bits, "cache_bits": p.cache_bits,
        "srams": {**{f"kv_cache_{h}": [p.bank_depth(h), p.word_bits] for h in range(p.max_heads)},
                  **{f"{name}_{h}": shape for h in range(p.max_heads)
                     for name, shape in (("q_buf", [p.qbuf_depth, p.word_bits]), ("t_buf", [p.max_seq, p.tbuf_bits]))}},
        "widths": {"dot": p.dot_bits, "prod": p.prod_bits, "acc": p.acc_bits, "num": p.num_bits,
                   "sum": p.sum_bits, "c": p.c_bits, "dim": p.dim_bits, "seq": p.seq_bits},
        "roms": ["exp2", "recip"],
    }
