"""The chip core: header check, load phase, the per-position micro-program, outputs, DONE.

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
             ├─► WordFeeder ─► MacInput (scan / convert) ─► MacArray.act   MacArray.o ─► VRF | LogitsWriter
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

from amaranth.hdl import Array, Cat, Const, Instance, Module, Mux, Shape, Signal, signed, unsigned
from amaranth.lib import stream, wiring
from amaranth.lib.data import ArrayLayout, StructLayout, View
from amaranth.lib.wiring import In, Out

from hw.chip_glue import Combine, ElemFeeder, WordFeeder
from hw.emb_fetch import EmbFetch
from hw.kda_engine import KdaEngine, KdaParams
from hw.lib.lut_rom import RomPort, rom_images, shared_rom
from hw.lib.pipe import Streamed, clamp
from hw.logits_writer import LogitsWriter
from hw.mac_array import EMB_RECORDS, MacArray, emb_table_bytes, mac_array_params_for
from hw.mac_input import MacInput
from hw.mem_engine import MemEngine, MemPortSignature
from hw.mla_engine import MlaEngine
from hw.mla_params import MlaParams
from hw.moe_router import MoeRouter, MoeRouterParams
from hw.norm_unit import NormOp, NormParams, NormUnit
from hw.params import ChipParams, require_instance
from hw.program import INTERLEAVED, LANES, MAX_SRCS, PRF_READERS, ROM_NAME, Opc, Program, fields, program_for
from hw.res_mixer import ResMixer, ResMixerParams
from hw.rom_check import RomCheck
from hw.roms import ROM_DIR, RomImage, init_file
from hw.vector_unit import Elementwise
from hw.vrf import Sram
from nano_k3.config import PRESETS as MODEL_PRESETS
from nano_k3.config import ModelConfig
from nano_k3.fixed import mla_score_const
from nano_k3.fxp_ops import X
from nano_k3.image import FORMAT_VERSION, MAGIC, STATUS_DONE, logits_stride
from nano_k3.tensors import record_names

RSP_DONE = 0x0000D0DE
# LUT ROMs shared between units: (table, the unit on read port 1, the unit on read port 2). Units on one
# port (a tuple) take turns by the op that runs (``TURNS``: the router during a ROUTE op, the element-wise
# unit during an EW op, ...; the last unit otherwise): their lookups only happen while their ops run (a KDA
# or MLA engine's last op lasts until its outputs are collected). A unit's ports are in the order listed
# (the element-wise unit's SiLU lane k takes its k-th sigmoid port, MLA head k its k-th exp2 port).
SHARED_ROMS = (("sigmoid", "kda", "ew"), ("sigmoid", ("router", "kda"), "ew"), ("rsqrt", ("norm", "kda"), "mixer"),
               ("recip", ("router", "mla"), "mixer"), ("exp2", "mla", ("mixer", "mla")), ("kda_decay", "kda", "kda"))
TURNS = {"router": Opc.ROUTE, "ew": Opc.EW, "norm": Opc.RMS, "mixer": Opc.MIX}


def shared_roms(chip: ChipParams) -> tuple:
    """``SHARED_ROMS``; with 4 element-wise lanes, lanes 2 and 3 take turns on the KDA's sigmoid ports."""
    if chip.ew_lanes <= 2:
        return SHARED_ROMS
    return (("sigmoid", ("ew", "kda"), "ew"), ("sigmoid", ("router", "ew", "kda"), "ew")) + SHARED_ROMS[2:]


DESC_BANKS = 4             # descriptor SRAM banks (an op reads three consecutive records at once)
MV_QUEUE = 4               # matvecs issued and not yet written back (the MAC array returns them in order)
CMD_RUN = 0x00000001
STATUS_BAD = 0xBAD00000
ADDR_BITS = 36
STATUS_BAD_ROM = STATUS_BAD | 0x80        # | the failing ROM's index: a ROM's checksum did not match
# Header checks in order; the status word of a rejected header is STATUS_BAD | (index + 1).
HDR_CHECKS = ("magic", "version", "dims", "group", "seq_len", "positions", "align", "order", "tensor_size",
              "descriptors")


class _RegFifo:
    """A first-word-fall-through FIFO of ``depth`` (a power of two) separate registers, so synthesis
    infers no memory (flow.synth allows only msh_sram / msh_rom arrays): ``w_en`` / ``w_rdy`` /
    ``w_data`` and ``r_en`` / ``r_rdy`` / ``r_data``."""

    def __init__(self, m: Module, name: str, shape, depth: int):
        regs = Array(Signal(Shape.cast(shape).width, name=f"{name}_q{k}") for k in range(depth))
        rd, wr = Signal(range(depth), name=f"{name}_rd"), Signal(range(depth), name=f"{name}_wr")
        n = Signal(range(depth + 1), name=f"{name}_n")
        self.w_en, self.r_en = Signal(name=f"{name}_w_en"), Signal(name=f"{name}_r_en")
        self.w_data, self.r_data = Signal(shape, name=f"{name}_w_data"), Signal(shape, name=f"{name}_r_data")
        self.w_rdy, self.r_rdy = Signal(name=f"{name}_w_rdy"), Signal(name=f"{name}_r_rdy")
        push, pop = Signal(name=f"{name}_push"), Signal(name=f"{name}_pop")
        m.d.comb += [self.w_rdy.eq(n != depth), self.r_rdy.eq(n != 0), self.r_data.eq(regs[rd]),
                     push.eq(self.w_en & self.w_rdy), pop.eq(self.r_en & self.r_rdy)]
        with m.If(push):
            m.d.sync += [regs[wr].eq(self.w_data), wr.eq(wr + 1)]
        with m.If(pop):
            m.d.sync += rd.eq(rd + 1)
        m.d.sync += n.eq(n + push - pop)


def _time_shared(m: Module, port: RomPort, turns: list[Signal]) -> tuple[RomPort, ...]:
    """len(turns) + 1 users of one ROM read port: user k addresses it while ``turns[k]`` is high (the
    first such k), the last user otherwise."""
    users = tuple(RomPort(port.table, tuple(Signal.like(a, name=f"{a.name}_u{k}") for a in port.addr), port.data)
                  for k in range(len(turns) + 1))
    for j, a in enumerate(port.addr):
        sel = users[-1].addr[j]
        for k in reversed(range(len(turns))):
            sel = Mux(turns[k], users[k].addr[j], sel)
        m.d.comb += a.eq(sel)
    return users


def _pow2(v: int) -> int:
    return 1 << max(0, (v - 1).bit_length())


def _log2(v: int) -> int:
    return v.bit_length() - 1


@dataclass(frozen=True)
class ChipBuild:
    """Everything one chip build is made of, derived from ChipParams (the model preset of the same name)."""

    chip: ChipParams
    cfg: ModelConfig
    program: Program
    rom_dir: str = ROM_DIR

    @property
    def slot_words(self) -> int:
        c = self.cfg
        return -(-max(c.d_model, c.mla_dc, c.kda_width, c.mla_heads * (c.mla_dk + c.mla_dr),
                      c.mla_heads * c.mla_dv) // LANES)

    @property
    def max_n(self) -> int:
        return _pow2(self.slot_words * LANES)

    @property
    def rom_images(self) -> list[RomImage]:
        """Every msh_rom of the chip in the ROM check's order: the LUT banks of ``shared_roms``, the program."""
        luts = [img for k, (table, *_) in enumerate(shared_roms(self.chip)) for img in rom_images(table, _lut_rom(table, k))]
        return luts + [self.program.rom_image()]


def _lut_rom(table: str, k: int) -> str:
    """Instance name of the k-th shared LUT ROM (its banks are ``<name>_even`` / ``<name>_odd``)."""
    return f"{table}{k}_rom"


def chip_build(chip: ChipParams, rom_dir: str = ROM_DIR) -> ChipBuild:
    if chip.name not in MODEL_PRESETS:
        raise ValueError(f"no model preset named {chip.name!r} for the chip build; known: {sorted(MODEL_PRESETS)}")
    cfg = MODEL_PRESETS[chip.name]
    return ChipBuild(chip, cfg, program_for(cfg), rom_dir)


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
        cfg, prog, chip = b.cfg, b.program, b.chip
        SW, L = b.slot_words, LANES
        max_n = b.max_n
        nrec = len(record_names(cfg))

        # ---- engines -----------------------------------------------------------------------------
        mp = dataclasses.replace(mac_array_params_for(chip), act_lanes=L, out_lanes=L)
        mem = m.submodules.mem = MemEngine(max_inflight=chip.mem_max_inflight, len_width=chip.mem_len_bits)
        wiring.connect(m, mem.mem, wiring.flipped(self.mem))
        mac = m.submodules.mac = MacArray(mp)
        minp = m.submodules.mac_input = MacInput(mac.act.payload.shape(), lanes=L, max_n=max_n)
        # LUT ROMs shared by engines that use the same table (a read port each, or one port in turns). Read
        # port 2 of every ROM is the ROM checker's while it runs (load phase, ``hw.rom_check``).
        roms: dict = {}                       # engine -> {table: (its ports, in SHARED_ROMS order)}
        turn = {u: Signal(name=f"{u}_turn") for u in TURNS}     # its op runs: the unit's turn on a shared port
        checked: list = []                    # (address, read data) of the port each ROM lends the checker
        check_turn = Signal()
        for k, (table, *units) in enumerate(shared_roms(chip)):
            p1, p2 = shared_rom(m, table, b.rom_dir, _lut_rom(table, k))
            chk, p2 = _time_shared(m, p2, [check_turn])
            checked += zip(chk.addr, chk.data)
            for unit, port in zip(units, (p1, p2)):
                for u, p in (zip(unit, _time_shared(m, port, [turn[x] for x in unit[:-1]])) if isinstance(unit, tuple)
                             else [(unit, port)]):
                    roms.setdefault(u, {}).setdefault(table, ())
                    roms[u][table] += (p,)
        NL = chip.norm_lanes
        norm = m.submodules.norm = NormUnit(NormParams(max_len=max_n, rom_dir=b.rom_dir, lanes=NL, l2=False),
                                            roms=roms["norm"])
        max_cands = max(len(o.srcs) for o in prog.ops if o.opc == Opc.MIX)
        ML = chip.mix_lanes
        mixer = m.submodules.mixer = ResMixer(ResMixerParams(max_cands=max_cands, max_d=_pow2(cfg.d_model), trace_e=False,
                                                             rom_dir=b.rom_dir, lanes=ML), roms=roms["mixer"])
        EL = chip.ew_lanes
        CL = chip.comb_lanes
        KL = chip.kda_lanes
        elem_lanes = {Opc.RMS: NL, Opc.EW: EL, Opc.MIX: ML, Opc.COMB: CL, Opc.KDA: KL}   # elements per feed transfer
        # a feed transfer carries K elements of each of an op's sources, and K PRF entries (mixer: w, proj)
        entries = max(MAX_SRCS, *(len(o.srcs) * elem_lanes.get(o.opc, 1) for o in prog.ops if o.opc in INTERLEAVED
                                   or o.opc in elem_lanes))
        ew = m.submodules.ew = Streamed(Elementwise(lanes=EL, rom_dir=b.rom_dir, roms=roms["ew"]))
        router = m.submodules.router = MoeRouter(MoeRouterParams(max_experts=max(2, cfg.n_experts),
                                                                 max_top_k=cfg.top_k), rom_dir=b.rom_dir,
                                                 roms=roms["router"])
        kda = m.submodules.kda = KdaEngine(KdaParams.for_model(cfg, KL), rom_dir=b.rom_dir, roms=roms["kda"])
        mla = m.submodules.mla = MlaEngine(MlaParams.for_model(cfg, L), rom_dir=b.rom_dir, roms=roms["mla"])
        comb = m.submodules.combine = Combine(top_k=cfg.top_k, lanes=CL)
        m.d.comb += [mla.heads.eq(cfg.mla_heads), mla.dk.eq(cfg.mla_dk), mla.dr.eq(cfg.mla_dr),
                     mla.dv.eq(cfg.mla_dv), mla.score_const.eq(mla_score_const(cfg.mla_dk + cfg.mla_dr))]

        # ---- storage -----------------------------------------------------------------------------
        n_slots = max(2, prog.n_slots)
        vrf = Sram(m, "vrf_sram", n_slots * SW, L * X.bits)
        prf_w = 128 * mp.store.banks
        prf_depth = max(2, _pow2(-(-max(2 * cfg.kda_width * cfg.conv_k, 2 * cfg.mla_dc, 2 * cfg.d_model) // (prf_w // 8))))
        prf = [Sram(m, "prf_a_sram", prf_depth, prf_w), Sram(m, "prf_b_sram", prf_depth, prf_w)]
        bb = mp.store.beat_bits
        # record r in bank r % DESC_BANKS, row r // DESC_BANKS: one cycle reads an op's three records
        desc = [Sram(m, f"desc{b}_sram", max(2, _pow2(nrec) // DESC_BANKS), -(-bb // 8) * 8)
                for b in range(DESC_BANKS)]
        ftab = fields(cfg, prog.n_slots)
        op_layout = StructLayout({k: unsigned(v) for k, v in ftab.items()})
        rom_w = prog.word_bits
        pc = Signal(range(prog.depth))
        rom_data = Signal(rom_w)
        rom_addr = Signal.like(pc)            # the ROM reads pc in FETCH, else the next op (asynchronous read)
        fetching = Signal()
        m.d.comb += rom_addr.eq(Mux(fetching, pc, pc + 1))
        prog_chk = Signal(max(1, _log2(prog.depth)), name="program_rom_chk_addr"), Signal(rom_w, name="program_rom_chk")
        m.submodules.program_rom = Instance(
            "msh_rom", p_DEPTH=prog.depth, p_WIDTH=rom_w, p_ADDRW=max(1, _log2(prog.depth)),
            p_INIT_FILE=init_file(f"{ROM_NAME}.hex", b.rom_dir),
            i_raddr1=rom_addr, o_rdata1=rom_data, i_raddr2=prog_chk[0], o_rdata2=prog_chk[1])
        checked.append(prog_chk)
        rom_check = m.submodules.rom_check = RomCheck(b.rom_images)       # in the order of ``checked``
        for img, (addr, data) in zip(b.rom_images, checked, strict=True):
            m.d.comb += [addr.eq(rom_check.addr[:len(addr)]), rom_check.data[img.name].eq(data)]
        m.d.comb += check_turn.eq(rom_check.busy)
        op = Signal(op_layout)

        # ---- header registers and checks ------------------------------------------------------------
        hdr = [Signal(32, name=f"hdr{k}") for k in range(32)]
        w = hdr
        expect = {2: cfg.n_layers, 3: cfg.d_model, 4: cfg.mla_heads, 5: cfg.mla_dk, 6: cfg.mla_dr, 7: cfg.mla_dv,
                  8: cfg.mla_dc, 9: cfg.kda_heads, 10: cfg.kda_dh, 11: cfg.conv_k, 12: cfg.n_experts,
                  13: cfg.top_k, 14: cfg.n_shared, 15: cfg.d_ff, 16: cfg.res_block, 17: cfg.vocab,
                  18: cfg.max_seq, 21: cfg.layer_bitmap, 22: nrec, 30: logits_stride(cfg)}
        mem_end = Signal(ADDR_BITS + 1)
        m.d.comb += mem_end.eq(w[28] + w[29])
        A = lambda v: v.as_unsigned()     # noqa: E731
        # Scratch must start right after the status block: memory ends at scratch + size (SPEC §3), so a
        # scratch address past the real memory is only visible as a gap after the status block.
        checks = {
            "magic": w[0] == MAGIC,
            "version": w[1] == FORMAT_VERSION,
            "dims": Cat(*[w[k] == v for k, v in expect.items()]).all(),
            "group": (w[20] == 64) | (w[20] == 128),
            "seq_len": (w[19] >= 1) & (w[19] <= cfg.max_seq),
            "positions": w[31] == w[19],
            "align": Cat(*[w[k][:4] == 0 for k in range(23, 29)]).all(),
            "order": ((w[23] >= 256) & (A(w[23]) + 16 * A(w[22]) <= w[24]) & (A(w[24]) + 4 * A(w[19]) <= w[25])
                      & (A(w[25]) + logits_stride(cfg) * A(w[19]) <= w[26]) & (A(w[26]) + 4 * A(w[19]) <= w[27])
                      & (A(w[27]) + 16 == w[28]) & (mem_end < (1 << ADDR_BITS))),
            "tensor_size": A(w[24]) - A(w[23]) - 16 * A(w[22]) <= 16 * mp.store.beats + emb_table_bytes(cfg),
        }
        fail_code = Signal(8)
        for k, name in reversed(list(enumerate(HDR_CHECKS[:-1]))):
            with m.If(~checks[name]):
                m.d.comb += fail_code.eq(k + 1)
        status_ok = Signal()
        m.d.comb += status_ok.eq((w[27][:4] == 0) & (w[27] >= 256) & (A(w[27]) + 16 <= mem_end)
                                 & (mem_end <= (1 << ADDR_BITS)))
        seq_len = w[19]
        group_log2 = Signal(4)
        m.d.comb += group_log2.eq(Mux(w[20] == 64, 6, 7))

        # ---- run state -----------------------------------------------------------------------------------
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
        rcnt = Signal(range(cfg.top_k + 1))

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
                     fetch.beat.payload.eq(mem.o.payload), fetch.tok_addr.eq(w[24]),
                     fetch.q_addr.eq(emb_addr[0]), fetch.s_addr.eq(emb_addr[1]), fetch.z_addr.eq(emb_addr[2]),
                     fetch.pos.eq(Mux(fetch0, 0, pos + 1))]
        with m.If(fetch.rd.valid):
            m.d.comb += [rd.valid.eq(1), rd.payload.eq(fetch.rd.payload), fetch.rd.ready.eq(rd.ready)]
        m.d.comb += [wr.valid.eq(lw.wr.valid), wr.payload.eq(lw.wr.payload), lw.wr.ready.eq(wr.ready & ~seq_wr)]
        m.d.sync += fetch0.eq(0)
        end_taken = Signal()                     # END: the argmax word is taken by the memory engine
        m.d.comb += fetch.start.eq(fetch0 | end_taken & (pos + 1 != seq_len))

        # ---- feeders ---------------------------------------------------------------------------------
        sb = max(1, (prog.n_slots - 1).bit_length())
        ef = m.submodules.elem_feeder = ElemFeeder(slot_bits=sb, slot_words=SW, vrf_abits=vrf.abits,
                                                   prf_width=prf_w, prf_abits=prf[0].abits, max_n=max_n,
                                                   dh=cfg.kda_dh, conv_k=cfg.conv_k,
                                                   word_srcs=max(len(o.srcs) for o in prog.ops
                                                                 if o.opc in INTERLEAVED), lanes=max(elem_lanes.values()),
                                                   entries=entries, pa_params=max(4, cfg.conv_k * KL, NL, ML),
                                                   pb_params=max(2, ML))
        wf = m.submodules.word_feeder = WordFeeder(slot_bits=sb, slot_words=SW, vrf_abits=vrf.abits)
        for k in range(4):
            m.d.comb += ef.srcs[k].eq(getattr(op, f"s{k}"))
        m.d.comb += [ef.ns.eq(op.ns), ef.n.eq(op.n), ef.pa_mode.eq(op.pa), ef.pb_mode.eq(op.pb),
                     ef.vrf_rdata.eq(vrf.r_data), ef.pa_rdata.eq(prf[0].r_data), ef.pb_rdata.eq(prf[1].r_data),
                     prf[0].r_en.eq(ef.pa_re), prf[0].r_addr.eq(ef.pa_raddr),
                     prf[1].r_en.eq(ef.pb_re), prf[1].r_addr.eq(ef.pb_raddr),
                     wf.vrf_rdata.eq(vrf.r_data), wf.slot.eq(op.s0)]
        m.d.comb += [vrf.r_en.eq(ef.vrf_re | wf.vrf_re), vrf.r_addr.eq(Mux(ef.vrf_re, ef.vrf_raddr, wf.vrf_raddr))]
        fo = ef.o
        is_op = lambda c: op.opc == int(c)   # noqa: E731
        m.d.comb += [turn[u].eq(is_op(c)) for u, c in TURNS.items()]

        # feed routing
        m.d.comb += [
            *[norm.i.payload.v[k].eq(fo.payload.data[k]) for k in range(NL)],
            *[norm.i.payload.w[k].eq(fo.payload.pa[16 * k:16 * k + 16]) for k in range(NL)],
            norm.i.payload.op.eq(NormOp.RMS), norm.i.payload.last.eq(fo.payload.final),
            *[mixer.i.payload.data[k][j].eq(fo.payload.data[k * ML + j]) for k in range(max_cands) for j in range(ML)],
            mixer.i.payload.n.eq(op.ns), mixer.i.payload.last.eq(fo.payload.final),
            *[mixer.w.payload[j].eq(fo.payload.pa[16 * j:16 * j + 16]) for j in range(ML)],
            *[mixer.proj.payload[j].eq(fo.payload.pb[16 * j:16 * j + 16]) for j in range(ML)],
            ew.i.payload.op.eq(op.ewop), *[ew.i.payload.a[k].eq(fo.payload.data[k]) for k in range(EL)],
            *[ew.i.payload.b[k].eq(fo.payload.data[EL + k]) for k in range(EL)],
            router.i.payload.logit.eq(fo.payload.data[0]), router.i.payload.bias.eq(fo.payload.pa[:16]),
            router.i.payload.top_k.eq(cfg.top_k), router.i.payload.last.eq(fo.payload.final),
            *[comb.i.payload[k][j].eq(fo.payload.data[k * CL + j]) for k in range(cfg.top_k + 2) for j in range(CL)],
            kda.i.payload.sel.eq(op.sel), kda.i.payload.idx.eq(fo.payload.idx),
            *[f.eq(v) for k in range(KL) for f, v in (
                (kda.i.payload.data[k], fo.payload.data[k]), (kda.i.payload.a[k], fo.payload.pb[:16]),   # one head
                (kda.i.payload.dtb[k], fo.payload.pa[16 * k:16 * k + 16]),
                (kda.i.payload.w[k], fo.payload.pa[16 * k:16 * k + 16]))],
            kda.i.payload.layer.eq(op.layer),
            kda.i.payload.restart.eq(pos == 0), kda.i.payload.last.eq(fo.payload.final & op.last),
        ]
        for j in range(cfg.conv_k * KL):                 # lane k's taps at k conv_k + j, as in the PRF
            m.d.comb += kda.i.payload.taps[j].eq(fo.payload.pa[16 * j:16 * j + 16])
        for j in range(cfg.top_k):
            m.d.comb += comb.weights[j].eq(weights[j])
        with m.Switch(op.opc):
            with m.Case(Opc.RMS):
                m.d.comb += [norm.i.valid.eq(fo.valid), fo.ready.eq(norm.i.ready)]
            with m.Case(Opc.MIX):
                m.d.comb += [mixer.i.valid.eq(fo.valid), mixer.w.valid.eq(fo.valid),
                             mixer.proj.valid.eq(fo.valid), fo.ready.eq(mixer.i.ready)]
            with m.Case(Opc.EW):
                m.d.comb += [ew.i.valid.eq(fo.valid), fo.ready.eq(ew.i.ready)]
            with m.Case(Opc.ROUTE):
                m.d.comb += [router.i.valid.eq(fo.valid), fo.ready.eq(router.i.ready)]
            with m.Case(Opc.COMB):
                m.d.comb += [comb.i.valid.eq(fo.valid), fo.ready.eq(comb.i.ready)]
            with m.Case(Opc.KDA):
                m.d.comb += [kda.i.valid.eq(fo.valid), fo.ready.eq(kda.i.ready)]

        # word feed routing: MAC input (scan/convert) or the MLA engine
        wo = wf.o
        m.d.comb += [minp.i.payload.eq(wo.payload), minp.n.eq(op.n),
                     mla.i.payload.data.eq(wo.payload.data), mla.i.payload.pos.eq(pos)]
        act_open = Signal()                       # no queued command still needs the array's vector
        m.d.comb += [mac.act.payload.eq(minp.o.payload), mac.act.valid.eq(minp.o.valid & act_open),
                     minp.o.ready.eq(mac.act.ready & act_open)]
        with m.If(is_op(Opc.MLA)):
            m.d.comb += [mla.i.valid.eq(wo.valid), wo.ready.eq(mla.i.ready)]
        with m.Else():
            m.d.comb += [minp.i.valid.eq(wo.valid), wo.ready.eq(minp.i.ready)]

        # ---- collectors: element writes, word writes ---------------------------------------------------
        col_cnt = Signal(range(max_n * 8 + 1))
        col_target = Signal.like(col_cnt)
        col_done = Signal()
        # element results: per op, the unit's output stream and the elements of one transfer
        results = {Opc.RMS: (norm.o, [norm.o.payload.y[k] for k in range(NL)]),
                   Opc.MIX: (mixer.o, [mixer.o.payload.data[j] for j in range(ML)]),
                   Opc.EW: (ew.o, [ew.o.payload.y[k] for k in range(EL)]),
                   Opc.COMB: (comb.o, [comb.o.payload[j] for j in range(CL)]),
                   Opc.KDA: (kda.o, [kda.o.payload.data[k] for k in range(KL)])}
        e_valid, e_step = Signal(), Signal(range(L + 1))
        e_word, e_mask = Signal(L * X.bits), Signal(4 * L)       # the transfer repeated over the word
        with m.Switch(op.opc):
            for opc, (port, vals) in results.items():
                with m.Case(opc):
                    m.d.comb += [e_valid.eq(port.valid), port.ready.eq(1), e_step.eq(len(vals)),
                                 e_word.eq(Cat(*vals * (L // len(vals)))), e_mask.eq((1 << 4 * len(vals)) - 1)]
        dst_base = Signal(vrf.abits)
        m.d.comb += dst_base.eq(op.dst * SW)
        emb_we = Signal()
        emb_word = Signal(L * X.bits)
        with m.If(e_valid):
            m.d.comb += [vrf.w_en.eq(1), vrf.w_addr.eq(dst_base + (col_cnt >> _log2(L))), vrf.w_data.eq(e_word),
                         vrf.w_strb.eq(e_mask << (col_cnt[:_log2(L)] * 4))]
            m.d.sync += col_cnt.eq(col_cnt + e_step)
            with m.If(col_cnt + e_step == col_target):
                m.d.sync += col_done.eq(1)

        # MAC results: VRF words or the logits writer
        head = op.head
        mo = mac.o
        mla_o = mla.o
        # Matvec results are written by their own collector: a queue holds the destination slot of
        # every matvec queued and not yet written (in command order, as the MAC array returns them), so
        # the sequencer moves on once a (non-head) matvec is queued. While the queue is not empty, DISPATCH
        # starts a keep MV or a PLD at once; another op once none of its sources is a queued destination
        # and, if it writes the VRF, its destination is not one either; the LM head, EMB and END wait for
        # the queue to empty. The op's own VRF writes go first: a matvec result waits for a free cycle.
        # A residual matvec (``res``) writes X.fit(p + y): each result word first reads p's word (the VRF
        # read port is free: while one is queued, DISPATCH starts nothing but a PLD, which also keeps p's
        # slot from being rewritten before it is read).
        mvq = Array(Signal(sb, name=f"mvq{k}") for k in range(MV_QUEUE))
        mvq_res = Array(Signal(name=f"mvq_res{k}") for k in range(MV_QUEUE))
        mvq_rs = Array(Signal(sb, name=f"mvq_rs{k}") for k in range(MV_QUEUE))   # p's slot
        mvq_rd = Signal(range(MV_QUEUE), name="mvq_rd")
        mvq_wr = Signal(range(MV_QUEUE), name="mvq_wr")
        mvq_n = Signal(range(MV_QUEUE + 1), name="mvq_n")
        mvq_push = Signal(name="mvq_push")
        mvq_pop = Signal(name="mvq_pop")
        mv_col = Signal(range(SW + 1))
        queued = Signal(MV_QUEUE)                 # queue entries still to be written
        for e in range(MV_QUEUE):
            m.d.comb += queued[e].eq((e - mvq_rd)[:_log2(MV_QUEUE)] < mvq_n)
        src_queued = Signal()                     # a source of the op is a queued destination
        m.d.comb += src_queued.eq(Cat(*[(k < op.ns) & queued[e] & (mvq[e] == getattr(op, f"s{k}"))
                                        for k in range(4) for e in range(MV_QUEUE)]).any())
        dst_queued = Signal()                     # the op's destination is a queued destination
        m.d.comb += dst_queued.eq(Cat(*[queued[e] & (mvq[e] == op.dst) for e in range(MV_QUEUE)]).any())
        res_pending = Signal()                    # a residual matvec is queued
        m.d.comb += res_pending.eq(Cat(*[queued[e] & mvq_res[e] for e in range(MV_QUEUE)]).any())
        vrf_taken = Signal()                      # the op's own results write the VRF this cycle
        head_res = Signal()
        res_got = Signal()                        # vrf.r_data holds p's word for the result in mo
        m.d.comb += head_res.eq(mvq_res[mvq_rd])
        with m.If(mvq_n != 0):
            with m.If(head_res & ~res_got):
                with m.If(mo.valid):
                    m.d.comb += [vrf.r_en.eq(1), vrf.r_addr.eq(mvq_rs[mvq_rd] * SW + mv_col)]
                    m.d.sync += res_got.eq(1)
            with m.Else():
                m.d.comb += mo.ready.eq(~vrf_taken)
            with m.If(mo.valid & ~vrf_taken & (~head_res | res_got)):
                ys = [mo.payload.y[j] for j in range(L)]
                sums = []
                for j in range(L):
                    t = Signal(signed(X.bits + 1), name=f"res_sum{j}")
                    m.d.comb += t.eq(ys[j] + vrf.r_data.word_select(j, X.bits).as_signed())
                    sums.append(clamp(t, X.lo, X.hi)[:X.bits])
                m.d.comb += [vrf.w_en.eq(1), vrf.w_addr.eq(mvq[mvq_rd] * SW + mv_col),
                             vrf.w_data.eq(Mux(head_res, Cat(*sums), Cat(*ys))),
                             vrf.w_strb.eq((Const(1, 4 * L + 1) << (mo.payload.count * 4)) - 1)]
                m.d.sync += [mv_col.eq(mv_col + 1), res_got.eq(0)]
                with m.If(mo.payload.last):
                    m.d.comb += mvq_pop.eq(1)
                    m.d.sync += [mv_col.eq(0), mvq_rd.eq(mvq_rd + 1)]
        with m.If(mvq_push):
            m.d.sync += [mvq[mvq_wr].eq(op.dst), mvq_res[mvq_wr].eq(op.res), mvq_rs[mvq_wr].eq(op.s1),
                         mvq_wr.eq(mvq_wr + 1)]
        m.d.sync += mvq_n.eq(mvq_n + mvq_push - mvq_pop)
        with m.If(is_op(Opc.MLA) & op.last):
            m.d.comb += mla_o.ready.eq(1)
            with m.If(mla_o.valid):
                m.d.comb += [vrf.w_en.eq(1), vrf.w_addr.eq(dst_base + col_cnt),
                             vrf.w_data.eq(mla_o.payload.data.as_value()), vrf.w_strb.eq(-1)]
                m.d.sync += col_cnt.eq(col_cnt + 1)
                with m.If(mla_o.payload.last):
                    m.d.sync += col_done.eq(1)
        m.d.comb += vrf_taken.eq(e_valid | (is_op(Opc.MLA) & op.last & mla_o.valid) | emb_we)
        with m.If(emb_we):
            m.d.comb += [vrf.w_en.eq(1), vrf.w_addr.eq(dst_base + col_cnt), vrf.w_data.eq(emb_word),
                         vrf.w_strb.eq(-1)]

        # router results
        with m.If(is_op(Opc.ROUTE)):
            m.d.comb += router.o.ready.eq(1)
            with m.If(router.o.valid):
                m.d.sync += [choice[rcnt].eq(router.o.payload.expert), weights[rcnt].eq(router.o.payload.weight),
                             rcnt.eq(rcnt + 1)]
                with m.If(router.o.payload.last):
                    m.d.sync += col_done.eq(1)

        # ---- PRF writer: a PLD's beats from the weight store's stream reader, in the background -----------
        pld_busy = Signal()
        pld_prf = Signal()
        pld_cnt = Signal(range(prf_depth + 1))
        with m.If(pld_busy):
            m.d.comb += mac.r_data.ready.eq(1)
            for k in range(2):
                m.d.comb += [prf[k].w_en.eq(mac.r_data.valid & (pld_prf == k)), prf[k].w_addr.eq(pld_cnt),
                             prf[k].w_data.eq(mac.r_data.payload.data.as_value()), prf[k].w_strb.eq(-1)]
            with m.If(mac.r_data.valid):
                m.d.sync += pld_cnt.eq(pld_cnt + 1)
                with m.If(mac.r_data.payload.last):
                    m.d.sync += pld_busy.eq(0)

        # ---- logits writer (head op): the MAC array's head results go through ``lw`` ---------------------
        m.d.comb += [lw.i.payload.y.eq(mo.payload.y.as_value()), lw.i.payload.last.eq(mo.payload.last),
                     lw.row.eq(row_addr)]

        # ---- the control FSM ------------------------------------------------------------------------------
        start_ef, start_wf = Signal(), Signal()
        m.d.comb += [ef.start.eq(start_ef), wf.start.eq(start_wf), ef.interleave.eq(Cat(*[is_op(c) for c in INTERLEAVED]).any())]
        with m.Switch(op.opc):
            for c, k in elem_lanes.items():
                with m.Case(c):
                    m.d.comb += ef.lanes_log2.eq(_log2(k))
        # Matvec commands wait in a FIFO for the MAC array, so the sequencer moves on while the array
        # works through earlier ones. An MV's activations enter the array only with the FIFO empty (the
        # queued commands still need the array's present vector).
        cq = _RegFifo(m, "mv_cmd", mac.i.payload.shape(), MV_QUEUE)
        mac_cmd = Signal(mac.i.payload.shape())
        # A PLD's copy goes first: the array takes no command while it runs (its readers come soon).
        m.d.comb += [cq.w_data.eq(mac_cmd), mac.i.payload.eq(cq.r_data), mac.i.valid.eq(cq.r_rdy & ~pld_busy),
                     cq.r_en.eq(mac.i.ready & ~pld_busy), act_open.eq(~cq.r_rdy)]
        fin_log2 = _log2_sig(m, op.fan_in)
        m.d.comb += [mac_cmd.q_beat.eq(dq[0]), mac_cmd.s_beat.eq(dq[1]), mac_cmd.z_beat.eq(dq[2]),
                     mac_cmd.fan_in.eq(op.fan_in), mac_cmd.fan_out_log2.eq(op.fan_out_log2),
                     mac_cmd.group_log2.eq(Mux(group_log2 < fin_log2, group_log2, fin_log2)),
                     mac_cmd.fmt.eq(head)]
        def record_of(o, name: str) -> Signal:
            """The first of op ``o``'s three store records (.q, .s, .z): an expert op's follow the router's choice."""
            ch_sel = Signal.like(choice[0], name=f"{name}_choice")
            with m.Switch(o.expert):
                for j in range(cfg.top_k):
                    with m.Case(j + 1):
                        m.d.comb += ch_sel.eq(choice[j])
            rec = Signal(range(nrec + 9 * cfg.n_experts), name=name)
            m.d.comb += rec.eq(o.rec + Mux(o.expert != 0, 9 * ch_sel, 0))
            return rec

        # Descriptor prefetch: every cycle of a position reads the three records of the op to dispatch
        # next (the ROM word at pc + 1; the loaded op itself while DISPATCH holds it), so an MV,
        # PLD or EMB finds its store beats in ``pf_q`` when it dispatches. ``pf_rec`` tags them: a
        # router choice made after the read only costs a re-read.
        rec_eff = record_of(op, "rec_eff")
        rec_next = record_of(View(op_layout, rom_data[:op_layout.size]), "rec_next")
        pf_q = [Signal(bb, name=f"pf_q{k}") for k in range(3)]
        pf_rec = Signal.like(rec_eff)
        pf_ok = Signal()
        pf_hit = Signal()
        m.d.comb += pf_hit.eq(pf_ok & (pf_rec == rec_eff))
        pf_target = Signal.like(rec_eff)
        rd_rec = Signal.like(rec_eff)              # the records read last cycle
        rd_ok = Signal()
        holding = Signal()                         # DISPATCH keeps the loaded op waiting
        m.d.comb += pf_target.eq(Mux(holding, rec_eff, rec_next))
        bsel = _log2(DESC_BANKS)
        for b, bank in enumerate(desc):
            j = (b - pf_target[:bsel])[:bsel]           # record pf_target + j sits in bank b
            m.d.comb += [bank.r_en.eq(1), bank.r_addr.eq((pf_target + j) >> bsel)]
        in_pos = Signal()
        m.d.sync += [rd_rec.eq(pf_target), rd_ok.eq(in_pos), pf_rec.eq(rd_rec), pf_ok.eq(rd_ok & in_pos)]
        with m.Switch(rd_rec[:bsel]):
            for r in range(DESC_BANKS):
                with m.Case(r):
                    m.d.sync += [pf_q[k].eq(desc[(r + k) % DESC_BANKS].r_data) for k in range(3)]
        nw_of_n = Signal(range(SW + 1))
        m.d.comb += nw_of_n.eq((op.n + (L - 1)) >> _log2(L))
        m.d.comb += [wf.w0.eq(Mux(is_op(Opc.MLA), op.w0, 0)), wf.nw.eq(Mux(is_op(Opc.MLA), op.nw, nw_of_n))]
        with m.If(in_pos):
            m.d.sync += self.cycles_pos.eq(self.cycles_pos + 1)

        with m.FSM(name="ctrl"):
            with m.State("IDLE"):
                m.d.comb += self.cmd.ready.eq(1)
                with m.If(self.cmd.valid & (self.cmd.payload == CMD_RUN)):
                    m.d.comb += rom_check.start.eq(1)          # the ROM check runs beside the load phase
                    m.next = "HDR_REQ"
            with m.State("HDR_REQ"):
                m.d.sync += self.cycles_load.eq(self.cycles_load + 1)
                m.d.comb += [rd.valid.eq(1), rd.payload.addr.eq(0), rd.payload.length.eq(256)]
                with m.If(rd.ready):
                    m.d.sync += cnt.eq(0)
                    m.next = "HDR_WAIT"
            with m.State("HDR_WAIT"):
                m.d.sync += self.cycles_load.eq(self.cycles_load + 1)
                m.d.comb += load_rx.eq(1)
                with m.If(mem.o.valid):
                    for k in range(8):
                        with m.If(cnt == k):
                            m.d.sync += [hdr[4 * k + j].eq(mem.o.payload.data.word_select(j, 32)) for j in range(4)]
                    m.d.sync += cnt.eq(cnt + 1)
                    with m.If(mem.o.payload.last):
                        m.next = "HDR_CHECK"
            with m.State("HDR_CHECK"):
                m.d.sync += self.cycles_load.eq(self.cycles_load + 1)
                with m.If(fail_code != 0):
                    m.d.sync += status_word.eq(STATUS_BAD | fail_code)
                    m.next = "ERR"
                with m.Else():
                    m.next = "DESC_REQ"
            with m.State("DESC_REQ"):
                m.d.sync += self.cycles_load.eq(self.cycles_load + 1)
                m.d.comb += [rd.valid.eq(1), rd.payload.addr.eq(w[23]), rd.payload.length.eq(w[22] << 4)]
                with m.If(rd.ready):
                    m.d.sync += [cnt.eq(0), bad_desc.eq(0)]
                    m.next = "DESC_WAIT"
            with m.State("DESC_WAIT"):
                m.d.sync += self.cycles_load.eq(self.cycles_load + 1)
                m.d.comb += load_rx.eq(1)
                with m.If(mem.o.valid):
                    a = mem.o.payload.data[32:64]
                    NE = len(EMB_RECORDS)
                    rel = Signal(ADDR_BITS, name="desc_rel")       # store beat offset (records NE.. only)
                    m.d.comb += rel.eq(a - Mux(cnt == NE, a, tensor_base))
                    for b, bank in enumerate(desc):
                        m.d.comb += [bank.w_en.eq(cnt[:_log2(DESC_BANKS)] == b), bank.w_addr.eq(cnt >> _log2(DESC_BANKS)),
                                     bank.w_data.eq(rel >> 4), bank.w_strb.eq(-1)]
                    with m.If(cnt == 0):
                        m.d.sync += first_addr.eq(a)
                    for k in range(NE):
                        with m.If(cnt == k):
                            m.d.sync += emb_addr[k].eq(a)
                    with m.If(cnt == NE):
                        m.d.sync += tensor_base.eq(a)
                    with m.If((a[:4] != 0) | (a < Mux(cnt == 0, a, first_addr)) | (a >= w[24])
                              | ((cnt > NE) & (a < tensor_base)) | ((cnt == 0) & (A(w[23]) + 16 * A(w[22]) > a))):
                        m.d.sync += bad_desc.eq(1)
                    m.d.sync += cnt.eq(cnt + 1)
                    with m.If(mem.o.payload.last):
                        m.next = "DESC_CHECK"
            with m.State("DESC_CHECK"):
                m.d.sync += self.cycles_load.eq(self.cycles_load + 1)
                with m.If(bad_desc | (A(w[24]) - tensor_base > 16 * mp.store.beats)):
                    m.d.sync += status_word.eq(STATUS_BAD | len(HDR_CHECKS))
                    m.next = "ERR"
                with m.Else():
                    m.next = "TENS_REQ"
            with m.State("TENS_REQ"):
                m.d.sync += self.cycles_load.eq(self.cycles_load + 1)
                m.d.comb += [rd.valid.eq(1), rd.payload.addr.eq(tensor_base), rd.payload.length.eq(w[24] - tensor_base)]
                with m.If(rd.ready):
                    m.d.sync += [cnt.eq(0), fetch0.eq(1)]
                    m.next = "TENS_WAIT"
            with m.State("TENS_WAIT"):
                m.d.sync += self.cycles_load.eq(self.cycles_load + 1)
                m.d.comb += [load_rx.eq(1), mac.w.valid.eq(mem.o.valid), mac.w.payload.beat.eq(cnt),
                             mac.w.payload.data.eq(mem.o.payload.data)]
                with m.If(mem.o.valid):
                    m.d.sync += cnt.eq(cnt + 1)
                    with m.If(mem.o.payload.last):
                        m.next = "ROM_WAIT"
            with m.State("ROM_WAIT"):           # position 0's token and row arrive meanwhile (EMB waits for them)
                m.d.sync += self.cycles_load.eq(self.cycles_load + 1)
                with m.If(rom_check.done):
                    with m.If(rom_check.ok):
                        m.d.sync += [pos.eq(0), row_addr.eq(w[25]), pc.eq(0)]
                        m.next = "FETCH"
                    with m.Else():
                        m.d.sync += status_word.eq(STATUS_BAD_ROM | rom_check.failed)
                        m.next = "ERR"

            # ---- positions: fetch / dispatch -----------------------------------------------------------
            def load_op():
                m.d.sync += [op.eq(rom_data), col_cnt.eq(0), col_done.eq(0), rcnt.eq(0)]
                m.next = "DISPATCH"

            def advance():
                """The op's last cycle: the next op is loaded from the ROM (read at pc + 1) right away."""
                m.d.sync += pc.eq(pc + 1)
                load_op()

            with m.State("FETCH"):               # the first op of a position
                m.d.comb += [in_pos.eq(1), fetching.eq(1)]
                load_op()
            with m.State("DISPATCH"):
                m.d.comb += [in_pos.eq(1), holding.eq(1)]
                # a PLD still copying holds up the next PLD and the PRF readers
                pld_hold = pld_busy & (is_op(Opc.PLD) | Cat(*[is_op(c) for c in PRF_READERS]).any())
                m.d.sync += col_target.eq(Mux(is_op(Opc.KDA), Mux(op.last, op.n_out, 0), op.n))
                feeds_only = (is_op(Opc.MV) & ~head | is_op(Opc.ROUTE)
                              | (is_op(Opc.KDA) | is_op(Opc.MLA)) & ~op.last)     # no VRF writes of its own
                writes_vrf = (is_op(Opc.RMS) | is_op(Opc.MIX) | is_op(Opc.EW) | is_op(Opc.COMB)
                              | (is_op(Opc.KDA) | is_op(Opc.MLA)) & op.last)
                needs_desc = is_op(Opc.MV) | is_op(Opc.PLD)
                # EMB waits for its row (fetched after the last position's argmax), the LM head for the last
                # position's logits to have left the logits writer
                io_hold = is_op(Opc.EMB) & ~fetch.valid | is_op(Opc.MV) & head & ~lw.drained
                with m.If(~pld_hold & ~io_hold & (pf_hit | ~needs_desc) & ~(res_pending & ~is_op(Opc.PLD))
                          & ((is_op(Opc.MV) & op.keep) | is_op(Opc.PLD) | (feeds_only & ~src_queued)
                             | (writes_vrf & ~src_queued & ~dst_queued) | (mvq_n == 0))):
                    m.d.comb += holding.eq(0)
                    m.d.sync += [dq[k].eq(pf_q[k]) for k in range(3)]
                    with m.Switch(op.opc):
                        with m.Case(Opc.EMB):
                            m.next = "EMB_W"
                        with m.Case(Opc.MV):
                            with m.If(op.keep):
                                m.next = "MV_CMD"
                            with m.Else():
                                m.d.comb += start_wf.eq(1)
                                m.next = "MV_SCAN"
                        with m.Case(Opc.PLD):
                            m.next = "PLD_REQ"
                        with m.Case(Opc.RMS, Opc.MIX, Opc.EW, Opc.ROUTE, Opc.COMB, Opc.KDA):
                            m.d.comb += start_ef.eq(1)
                            m.next = "ELEM"
                        with m.Case(Opc.MLA):
                            m.d.comb += start_wf.eq(1)
                            m.next = "MLA"
                        with m.Case(Opc.END):
                            m.next = "END"

            # ---- PLD ---------------------------------------------------------------------------
            with m.State("PLD_REQ"):          # the copy itself runs in the background (the PRF writer)
                m.d.comb += [in_pos.eq(1), mac.r_cmd.valid.eq(1), mac.r_cmd.payload.start.eq(dq[0]),
                             mac.r_cmd.payload.count.eq(op.nbeats)]
                with m.If(mac.r_cmd.ready):
                    m.d.sync += [pld_busy.eq(1), pld_prf.eq(op.prf), pld_cnt.eq(0)]
                    advance()

            # ---- EMB ---------------------------------------------------------------------------
            with m.State("EMB_W"):           # the fetched row, dequantised, one VRF word a cycle
                m.d.comb += [in_pos.eq(1), emb_we.eq(1), fetch.word_idx.eq(col_cnt), emb_word.eq(fetch.word)]
                m.d.sync += col_cnt.eq(col_cnt + 1)
                with m.If(col_cnt == (cfg.d_model // L) - 1):
                    advance()

            # ---- MV ----------------------------------------------------------------------------
            with m.State("MV_SCAN"):
                m.d.comb += [in_pos.eq(1), minp.convert.eq(0)]
                with m.If(~wf.busy):
                    m.next = "MV_SCAN2"
            with m.State("MV_SCAN2"):          # the scan's shift register settles
                m.d.comb += [in_pos.eq(1), start_wf.eq(1), minp.convert.eq(1)]
                m.next = "MV_CONV"
            with m.State("MV_CONV"):
                m.d.comb += [in_pos.eq(1), minp.convert.eq(1)]
                with m.If(~wf.busy & ~minp.o.valid):
                    m.next = "MV_CMD"
            with m.State("MV_CMD"):
                m.d.comb += [in_pos.eq(1), cq.w_en.eq(cq.w_rdy & (mvq_n != MV_QUEUE)), minp.convert.eq(1)]
                with m.If(cq.w_en):
                    with m.If(head):
                        m.d.comb += lw.start.eq(1)
                        m.next = "MV_OUT"
                    with m.Else():
                        m.d.comb += mvq_push.eq(1)
                        advance()
            with m.State("MV_OUT"):           # the LM head: its results into the logits writer (argmax, memory)
                m.d.comb += [in_pos.eq(1), lw.i.valid.eq(mo.valid), mo.ready.eq(lw.i.ready)]
                with m.If(mo.valid & lw.i.ready & mo.payload.last):
                    advance()

            # ---- element ops ---------------------------------------------------------------------------
            with m.State("ELEM"):
                m.d.comb += in_pos.eq(1)
                with m.If(~ef.busy & (col_done | (col_target == 0) & ~is_op(Opc.ROUTE))):
                    advance()
            with m.State("MLA"):
                m.d.comb += in_pos.eq(1)
                with m.If(~wf.busy & (col_done | ~op.last)):
                    advance()

            # ---- end of a position -----------------------------------------------------------------
            # The argmax word goes out ahead of the logits beats still in the writer; the next position's
            # fetch starts in the cycle the memory engine takes it (its reads follow the write, SPEC §3).
            with m.State("END"):
                m.d.comb += in_pos.eq(1)
                am_addr = Signal(ADDR_BITS)
                m.d.comb += am_addr.eq(w[26] + (pos << 2))
                with m.If(lw.argmax_valid):
                    m.d.comb += [seq_wr.eq(1), wr.valid.eq(1), wr.payload.addr.eq(Cat(Const(0, 4), am_addr[4:])),
                                 wr.payload.data.eq(lw.argmax.as_unsigned() << (pos[:2] * 32)),
                                 wr.payload.strb.eq(Const(0xF, 16) << (pos[:2] * 4)), end_taken.eq(wr.ready)]
                with m.If(end_taken):
                    m.d.sync += [pos.eq(pos + 1), row_addr.eq(row_addr + logits_stride(cfg)), pc.eq(0)]
                    with m.If(pos + 1 == seq_len):
                        m.d.sync += status_word.eq(STATUS_DONE)
                        m.next = "STATUS"
                    with m.Else():
                        m.next = "FETCH"

            # ---- finish -----------------------------------------------------------------------------------
            with m.State("ERR"):
                with m.If(status_ok):
                    m.next = "STATUS"
                with m.Else():
                    m.next = "DRAIN"
            with m.State("STATUS"):           # the last write: after every logits beat
                with m.If(lw.drained):
                    m.d.comb += [seq_wr.eq(1), wr.valid.eq(1), wr.payload.addr.eq(w[27]),
                                 wr.payload.data.eq(status_word), wr.payload.strb.eq(-1)]
                    with m.If(wr.ready):
                        m.next = "DRAIN"
            with m.State("DRAIN"):
                with m.If(mem.writes_drained & mem.idle & ~fetch.busy):
                    m.next = "RSP"
            with m.State("RSP"):
                m.d.comb += [self.rsp.valid.eq(1), self.rsp.payload.eq(RSP_DONE)]
                with m.If(self.rsp.ready):
                    m.next = "HALT"
            with m.State("HALT"):
                pass
        return m


def _log2_sig(m: Module, v):
    """log2 of a power-of-two signal (priority encoder)."""
    out = Signal(range(len(v) + 1), name="fan_in_log2")
    for b in range(len(v)):
        with m.If(v[b]):
            m.d.comb += out.eq(b)
    return out
