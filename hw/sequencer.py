"""The chip core: header check, load phase, the per-position micro-program, outputs, DONE.

``ChipCore.elaborate`` builds one module from parts that each add their logic to it (no hierarchy of
their own, so synthesis sees the engines below ``core`` as before): ROM turn-taking and the ROM check
(hw/chip_roms.py), the loader (hw/chip_load.py), the op feeds (hw/chip_feed.py), the result collectors
and VRF write arbitration (hw/chip_collect.py) and op dispatch (hw/chip_dispatch.py); this file holds
the engines, the storage, the memory port and the end of a run. The parts share their nets through
``ctx``, a namespace each part reads from and adds to, in the order ``elaborate`` calls them.

Block diagram (everything below ``ChipCore``; hw/chip_top.py only renames ports to SPEC §1):

    cmd ─► control FSM ─► MemEngine ◄──► SPEC memory port (reads: header, descriptors, tensors; then per
             │   │           ▲   ▲         position its token and embedding row; writes: logits beats,
             │   │           │   │         argmax words, status word)
             │   │     EmbFetch  LogitsWriter (hw/emb_fetch.py, hw/logits_writer.py)
             │   └── desc0..3_sram (store beat of every record; the next op's three are prefetched)
             ▼
      microcode msh_rom (hw/program.py, one op per word) ─► op register ─► per-op sub-FSM
             │
      VRF msh_sram (slots of X vectors, 16 per word) ◄── collectors ◄── engine outputs
             │        ▲
             ├─► WordFeeder ─► MacInput (slot_or) ─► MacArray.act        MacArray.o ─► VRF | LogitsWriter
             ├─► WordFeeder ─► MlaEngine                                     (FIFO to memory, argmax)
             └─► ElemFeeder (+ PRF a/b msh_sram) ─► NormUnit | ResMixer | Elementwise | KdaEngine |
                                                    MoeRouter (experts, weights → registers) | Combine
      MacArray's weight store ◄── tensor block after the embedding table (load phase); its stream reader
      fills PRF a/b (PLD). The embedding table stays in memory.
      LUT ROMs (``shared_roms``): one msh_rom serves two LUT units of its table, a read port each;
      ROM check (``hw.rom_check``): reads every msh_rom through its port 2 during the load phase.

Positions run as a decoder's: position t + 1's token id and embedding row are read (``EmbFetch``) only once
position t's argmax word has been taken by the memory engine, whose one request register then sends that
write before the reads (hw/emb_fetch.py; verification/decoder_order.py checks it on the port). EMB waits
for the row. What overlaps: the LM head's last logits beats drain from the ``LogitsWriter`` after the
argmax word (written first; SPEC §4.5 only orders the status word last) while the next token is read,
and the next position's first parameter load. Position 0's fetch starts with the tensor block's read.

The build serves exactly one model configuration (the micro-program is generated for it): the
header's dimensions, layer bitmap, record count and logits stride must equal the build's; the group
size (64/128), seq_len (1..max_seq) and every address are read at run time. A header that fails
any check ends the run with status ``0xBAD000xx`` (xx = the first failing check, ``HDR_CHECKS``)
written to the status address if that address is plausible, then DONE.

The chip trusts its ROMs only once it has checked them: during the load phase ``hw.rom_check.RomCheck``
reads every word of every msh_rom (the LUT banks, then the micro-program) through read port 2 and
compares each ROM's checksum with the one the generator computed from the table. A mismatch (a ROM file
missing, so all zeros, or corrupt) ends the run, once the load phase is over, with status
``STATUS_BAD_ROM | k`` = ``0xBAD00080 + k`` (k = the index of the first failing ROM in the check order,
``config.json`` ``derived.roms``), then DONE; no position runs. The check runs beside the load phase's
reads (it starts when RUN is accepted), so it costs cycles only where the load phase is shorter.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from types import SimpleNamespace

from amaranth.hdl import Array, Module, Mux, Signal, unsigned
from amaranth.lib import stream, wiring
from amaranth.lib.data import StructLayout
from amaranth.lib.wiring import In, Out

from hw.chip_collect import collectors, head_results, prf_writer, slot_or
from hw.chip_dispatch import dispatch_states, op_issue, op_states
from hw.chip_feed import feeders
from hw.chip_glue import Combine
from hw.chip_load import ADDR_BITS, DESC_BANKS, header_checks, load_states
from hw.chip_roms import lut_rom_name, program_rom, share_lut_roms, shared_roms
from hw.emb_fetch import EmbFetch
from hw.kda_engine import KdaEngine, kda_params_for
from hw.lib.lut_rom import rom_images
from hw.lib.pipe import Streamed
from hw.logits_writer import LogitsWriter
from hw.mac_array import EMB_RECORDS, MacArray, mac_array_params_for
from hw.mac_input import MacInput
from hw.mem_engine import MemEngine, MemPortSignature
from hw.mla_engine import MlaEngine, mla_params_for
from hw.moe_router import MoeRouter, MoeRouterParams
from hw.norm_unit import NormParams, NormUnit
from hw.params import ChipParams, pow2_ceil, require_instance
from hw.program import INTERLEAVED, LANES, MAX_SRCS, Opc, Program, fields, program_for
from hw.res_mixer import ResMixer, ResMixerParams
from hw.roms import ROM_DIR, RomImage
from hw.vector_unit import Elementwise
from hw.vrf import Sram
from nano_k3.config import ModelConfig
from nano_k3.fixed import mla_score_const
from nano_k3.fxp_ops import X
from nano_k3.tensors import record_names

RSP_DONE = 0x0000D0DE


@dataclass(frozen=True)
class ChipBuild:
    """Everything one chip build is made of, derived from ChipParams and its model (``ChipParams.model``)."""

    chip: ChipParams
    cfg: ModelConfig
    program: Program
    rom_dir: str = ROM_DIR

    @property
    def slot_words(self) -> int:
        """VRF words of a slot: a power of two, so a VRF address's slot is its high bits (``slot_or``)."""
        c = self.cfg
        return pow2_ceil(-(-max(c.d_model, c.mla_dc, c.kda_width, c.mla_heads * (c.mla_dk + c.mla_dr),
                                c.mla_heads * c.mla_dv) // LANES))

    @property
    def max_n(self) -> int:
        return pow2_ceil(self.slot_words * LANES)

    @property
    def rom_images(self) -> list[RomImage]:
        """Every msh_rom of the chip in the ROM check's order: the LUT banks of ``shared_roms``, the program."""
        luts = [img for k, (table, *_) in enumerate(shared_roms(self.chip)) for img in rom_images(table, lut_rom_name(table, k))]
        return luts + [self.program.rom_image()]


FEED_LANES = {Opc.RMS: "norm_lanes", Opc.EW: "ew_lanes", Opc.MIX: "mix_lanes", Opc.COMB: "comb_lanes",
              Opc.KDA: "kda_lanes"}          # the ChipParams field of each op class the ElemFeeder feeds


def feed_lanes(chip: ChipParams) -> dict[Opc, int]:
    """Elements per element-feed transfer of each op class the ElemFeeder feeds."""
    return {opc: getattr(chip, name) for opc, name in FEED_LANES.items()}


def chip_build(chip: ChipParams, rom_dir: str = ROM_DIR) -> ChipBuild:
    """The build of ``chip``; rejects lane counts the program's element feeds cannot use (the ElemFeeder
    moves K elements a transfer and ends a feed at element n − K: n must be a multiple of K)."""
    program = program_for(chip.model)
    lanes = feed_lanes(chip)
    for op in program.ops:
        if op.opc in lanes and op.n % lanes[op.opc]:
            raise ValueError(f"chip {chip.name!r}: op {op.listing().strip()!r} feeds n={op.n} elements, not a "
                             f"multiple of {FEED_LANES[op.opc]}={lanes[op.opc]}")
    return ChipBuild(chip, chip.model, program, rom_dir)


class ChipCore(wiring.Component):
    """The whole chip behind a cmd / rsp / memory-port signature (see the module docstring)."""

    def __init__(self, build: ChipBuild):
        require_instance(self, build, ChipBuild)
        self.build = build
        super().__init__({
            "cmd": In(stream.Signature(32)),
            "rsp": Out(stream.Signature(32)),
            "mem": Out(MemPortSignature()),
            "cycles_load": Out(32),            # profiling: cycles spent before the first position
            "cycles_pos": Out(32),             # profiling: cycles of all positions
        })

    def elaborate(self, platform):
        m = Module()
        b = self.build
        ctx = SimpleNamespace(core=self, b=b, cfg=b.cfg, prog=b.program, chip=b.chip, SW=b.slot_words, L=LANES,
                              max_n=b.max_n, nrec=len(record_names(b.cfg)))
        for part in (_engines, _storage, header_checks, _run_state, _memory_port, feeders, collectors, slot_or,
                     prf_writer, head_results, op_issue):
            part(m, ctx)
        with m.FSM(name="ctrl"):
            for states in (load_states, dispatch_states, op_states, _finish_states):
                states(m, ctx)
        return m


def _engines(m: Module, ctx) -> None:
    """The memory engine, the MAC array and its input, the LUT ROMs (``share_lut_roms``) and every
    engine the ops feed."""
    core, b, cfg, chip, prog, L, max_n = ctx.core, ctx.b, ctx.cfg, ctx.chip, ctx.prog, ctx.L, ctx.max_n
    mp = dataclasses.replace(mac_array_params_for(chip), act_lanes=L, out_lanes=L)
    mem = m.submodules.mem = MemEngine(max_inflight=chip.mem_max_inflight, len_width=chip.mem_len_bits)
    wiring.connect(m, mem.mem, wiring.flipped(core.mem))
    mac = m.submodules.mac = MacArray(mp)
    minp = m.submodules.mac_input = MacInput(mac.act.payload.shape(), lanes=L, max_n=max_n)
    share_lut_roms(m, ctx)
    roms = ctx.roms
    NL = chip.norm_lanes
    norm = m.submodules.norm = NormUnit(NormParams(max_len=max_n, rom_dir=b.rom_dir, lanes=NL, l2=False),
                                        roms=roms["norm"])
    max_cands = max(len(o.srcs) for o in prog.ops if o.opc == Opc.MIX)
    ML = chip.mix_lanes
    mixer = m.submodules.mixer = ResMixer(ResMixerParams(max_cands=max_cands, max_d=pow2_ceil(cfg.d_model), trace_e=False,
                                                         rom_dir=b.rom_dir, lanes=ML), roms=roms["mixer"])
    EL = chip.ew_lanes
    CL = chip.comb_lanes
    KL = chip.kda_lanes
    elem_lanes = feed_lanes(chip)                  # elements per feed transfer
    # a feed transfer carries K elements of each of an op's sources, and K PRF entries (mixer: w, proj)
    entries = max(MAX_SRCS, *(len(o.srcs) * elem_lanes.get(o.opc, 1) for o in prog.ops if o.opc in INTERLEAVED
                               or o.opc in elem_lanes))
    ew = m.submodules.ew = Streamed(Elementwise(lanes=EL, rom_dir=b.rom_dir, roms=roms["ew"]))
    router = m.submodules.router = MoeRouter(MoeRouterParams(max_experts=max(2, cfg.n_experts),
                                                             max_top_k=cfg.top_k), rom_dir=b.rom_dir,
                                             roms=roms["router"])
    kda = m.submodules.kda = KdaEngine(kda_params_for(chip), rom_dir=b.rom_dir, roms=roms["kda"])
    mla = m.submodules.mla = MlaEngine(mla_params_for(chip), rom_dir=b.rom_dir, roms=roms["mla"])
    comb = m.submodules.combine = Combine(top_k=cfg.top_k, lanes=CL)
    m.d.comb += [mla.heads.eq(cfg.mla_heads), mla.dk.eq(cfg.mla_dk), mla.dr.eq(cfg.mla_dr),
                 mla.dv.eq(cfg.mla_dv), mla.score_const.eq(mla_score_const(cfg.mla_dk + cfg.mla_dr))]
    vars(ctx).update(mp=mp, mem=mem, mac=mac, minp=minp, NL=NL, ML=ML, EL=EL, CL=CL, KL=KL, norm=norm, mixer=mixer,
                     max_cands=max_cands, elem_lanes=elem_lanes, entries=entries, ew=ew, router=router, kda=kda,
                     mla=mla, comb=comb)


def _storage(m: Module, ctx) -> None:
    """The VRF, PRF a / b and descriptor msh_srams, the program counter and the micro-program ROM
    (``program_rom``), the loaded op ``ctx.op``."""
    cfg, prog, mp, nrec, SW, L = ctx.cfg, ctx.prog, ctx.mp, ctx.nrec, ctx.SW, ctx.L
    n_slots = max(2, prog.n_slots)
    vrf = Sram(m, "vrf_sram", n_slots * SW, L * X.bits)
    prf_w = 128 * mp.store.banks
    prf_depth = max(2, pow2_ceil(-(-max(2 * cfg.kda_width * cfg.conv_k, 2 * cfg.mla_dc, 2 * cfg.d_model) // (prf_w // 8))))
    prf = [Sram(m, "prf_a_sram", prf_depth, prf_w), Sram(m, "prf_b_sram", prf_depth, prf_w)]
    bb = mp.store.beat_bits
    # record r in bank r % DESC_BANKS, row r // DESC_BANKS: one cycle reads an op's three records
    desc = [Sram(m, f"desc{b}_sram", max(2, pow2_ceil(nrec) // DESC_BANKS), -(-bb // 8) * 8)
            for b in range(DESC_BANKS)]
    ftab = fields(cfg, prog.n_slots)
    op_layout = StructLayout({k: unsigned(v) for k, v in ftab.items()})
    rom_w = prog.word_bits
    pc = Signal(range(prog.depth))
    rom_data = Signal(rom_w)
    rom_addr = Signal.like(pc)            # the ROM reads pc in FETCH, else the next op (asynchronous read)
    fetching = Signal()
    vars(ctx).update(vrf=vrf, prf_w=prf_w, prf_depth=prf_depth, prf=prf, bb=bb, desc=desc, op_layout=op_layout,
                     rom_w=rom_w, pc=pc, rom_data=rom_data, rom_addr=rom_addr, fetching=fetching)
    program_rom(m, ctx)
    op = Signal(op_layout)
    ctx.op = op


def _run_state(m: Module, ctx) -> None:
    """The registers of a run: position, addresses the header and descriptors give, status, router choices."""
    cfg, bb = ctx.cfg, ctx.bb
    pos = Signal(range(cfg.max_seq + 1))
    row_addr = Signal(ADDR_BITS)             # logits row of this position
    status_word = Signal(32)
    bad_desc = Signal()
    tensor_base = Signal(ADDR_BITS)          # the store's first beat: the first record after the embedding's
    first_addr = Signal(ADDR_BITS)           # the first record's address (records ascend from it)
    emb_addr = [Signal(ADDR_BITS, name=f"emb_addr{k}") for k in range(len(EMB_RECORDS))]   # .q, .s, .z
    cnt = Signal(16)                         # beat / word counter of the current phase
    choice = Array(Signal(range(max(2, cfg.n_experts)), name=f"choice{j}") for j in range(cfg.top_k))
    weights = Array(Signal(24, name=f"rweight{j}") for j in range(cfg.top_k))
    dq = [Signal(bb, name=f"desc_q{k}") for k in range(3)]   # the op's .q/.s/.z store beats
    rcnt = Signal(range(cfg.top_k + 1))      # router weights collected
    route_w = Signal()                       # ROUTE has ended, its weights are still to come
    vars(ctx).update(pos=pos, row_addr=row_addr, status_word=status_word, bad_desc=bad_desc,
                     tensor_base=tensor_base, first_addr=first_addr, emb_addr=emb_addr, cnt=cnt, choice=choice,
                     weights=weights, dq=dq, rcnt=rcnt, route_w=route_w)


def _memory_port(m: Module, ctx) -> None:
    """The memory engine's users: the load phase's reads, the embedding fetcher, the logits writer
    and the control FSM's own writes."""
    cfg, chip, L, mem, h, emb_addr, pos = ctx.cfg, ctx.chip, ctx.L, ctx.mem, ctx.h, ctx.emb_addr, ctx.pos
    seq_len = ctx.seq_len
    # Memory-engine hookups. Reads: the control FSM's load-phase ranges (header, descriptors, tensor
    # block; their beats go to it while ``load_rx``), otherwise the embedding fetcher's (its requests
    # start once the FSM's last range is taken). Writes: the FSM's own (argmax words, status) before
    # the logits writer's beats.
    fetch = m.submodules.emb_fetch = EmbFetch(cfg.d_model, cfg.max_seq, len_width=chip.mem_len_bits)
    lw = m.submodules.logits = LogitsWriter(cfg.vocab, lanes=L)
    rd = mem.rd_cmd
    wr = mem.wr
    load_rx, seq_wr = Signal(), Signal()
    fetch0 = Signal()                        # position 0's fetch starts with the tensor block's read
    m.d.comb += [mem.o.ready.eq(1), fetch.beat.valid.eq(mem.o.valid & ~load_rx),
                 fetch.beat.payload.eq(mem.o.payload), fetch.tok_addr.eq(h.tokens_addr),
                 fetch.q_addr.eq(emb_addr[0]), fetch.s_addr.eq(emb_addr[1]), fetch.z_addr.eq(emb_addr[2]),
                 fetch.pos.eq(Mux(fetch0, 0, pos + 1))]
    with m.If(fetch.rd.valid):
        m.d.comb += [rd.valid.eq(1), rd.payload.eq(fetch.rd.payload), fetch.rd.ready.eq(rd.ready)]
    m.d.comb += [wr.valid.eq(lw.wr.valid), wr.payload.eq(lw.wr.payload), lw.wr.ready.eq(wr.ready & ~seq_wr)]
    m.d.sync += fetch0.eq(0)
    end_taken = Signal()                     # END: the argmax word is taken by the memory engine
    m.d.comb += fetch.start.eq(fetch0 | end_taken & (pos + 1 != seq_len))
    vars(ctx).update(fetch=fetch, lw=lw, rd=rd, wr=wr, load_rx=load_rx, seq_wr=seq_wr, fetch0=fetch0,
                     end_taken=end_taken)


def _finish_states(m: Module, ctx) -> None:
    """The end of a run: the status word (after every logits beat), the memory engine drained, DONE."""
    core, status_ok, lw, seq_wr, wr, h = ctx.core, ctx.status_ok, ctx.lw, ctx.seq_wr, ctx.wr, ctx.h
    status_word, mem, fetch = ctx.status_word, ctx.mem, ctx.fetch
    with m.State("ERR"):
        with m.If(status_ok):
            m.next = "STATUS"
        with m.Else():
            m.next = "DRAIN"
    with m.State("STATUS"):           # the last write: after every logits beat
        with m.If(lw.drained):
            m.d.comb += [seq_wr.eq(1), wr.valid.eq(1), wr.payload.addr.eq(h.status_addr),
                         wr.payload.data.eq(status_word), wr.payload.strb.eq(-1)]
            with m.If(wr.ready):
                m.next = "DRAIN"
    with m.State("DRAIN"):
        with m.If(mem.writes_drained & mem.idle & ~fetch.busy):
            m.next = "RSP"
    with m.State("RSP"):
        m.d.comb += [core.rsp.valid.eq(1), core.rsp.payload.eq(RSP_DONE)]
        with m.If(core.rsp.ready):
            m.next = "HALT"
    with m.State("HALT"):
        pass
