"""Performance model of msh_chip_top: cycles of every micro-program op, phase by phase, and cycles/token.

Pure Python (imports engine classes for their constants, elaborates nothing). The chip
(hw/sequencer.py) runs the ops of ``hw.program`` one after another, each op's feed and collect
concurrently, except that a (non-head) MV ends as soon as its command is queued for the MAC array: the
array works through the queued commands and the results drain into the VRF while the next ops run.
An op waits only for the results it depends on (its sources; its destination if it writes the VRF),
a PLD's copy for the array's store read port, and the array takes no command while a PLD copies
(``PerfModel.position`` runs that timeline). In isolation:

    op cycles = sequencer overhead of its class (DISPATCH, handshakes; ``SeqOverheads``)
              + the engine's own cycle formula (hw/*.py, cited per class below)

Engine formulas used (no stalls):
* MV      results: ``MacArrayParams.issue_cycles`` + ``MacArray.LATENCY`` + (max(``MacArrayParams.scale_steps``,
          chunks of the last block) − 1) after the command; the op itself: one WordFeeder pass through
          ``MacInput`` (``words``) unless ``keep``. The LM head waits for its
          results, which go into the logits writer's FIFO (``LogitsWriter.DEPTH`` chunks; a chunk waits only
          when it is full; the FIFO sends no beat after a push: ``head_chunks``). A residual MV (``res``)
          writes a result word every other cycle (it reads p's word first).
* RMS     ``n/K + NormUnit.GAP + n/K − 1`` (two passes of K = ``norm_lanes`` elements a cycle, hw/norm_unit.py)
* MIX     ``ResMixer.latency(candidates, d, mix_lanes)`` + the interleaved feed's word reads (as EW)
* EW      ``n/K + (ns − 1)·⌈n/16⌉ + Elementwise.LATENCY`` (K = ``ew_lanes`` elements a cycle); COMB the
          same with K = ``comb_lanes`` and ``Combine.LATENCY`` (``ns`` sources side by side: the ElemFeeder reads each
          source's word once per 16 elements)
* ROUTE   ``MoeRouter.choice_latency(E)``: it ends with the experts; the weights follow
          (``MoeRouter.latency(E) + top_k − 1``), COMB waits for them
* KDA     ``kda_lanes`` elements a cycle; the last segment (Z, the gate) ends ``KdaEngine.z_drain`` after its
          last transfer, ``KdaEngine.drain`` after the last K/V/B/F one (the rows start then) or
          ``KdaEngine.q_drain`` after Q's last (the second passes wait for q's norms), whichever is latest
* MLA     the feed segments one word a cycle; the last adds ``MlaParams.attention_cycles(t)`` (after the
          load): the attention over the t + 1 cached positions, all heads at once (grows with t)
* PLD     the command only; in the background one weight-store read per ``banks`` beats (hw/weight_store.py)
          once the MAC array leaves the store port, + read latency: the PRF readers and the next PLD
          wait for it
* EMB     d/16 VRF writes, once its embedding row is in (``fetch_ready``): the position's token and row
          are read after the previous position's argmax word (hw/emb_fetch.py), two round trips through
          the port, each the memory engine's and the fetcher's pipeline cycles plus SPEC §3 latency at its
          expectation (base + J/2 for the token's one read, base + the expected maximum of the row's
          reads' jitter: later responses cannot overtake; the row's reads alternate with the previous
          position's logits beats still draining)
The VRF has one port in place and route (fakeram45, docs/pnr.md), so its writes go first and a feed's
reads wait (hw/chip_glue.py): an op's feed waits in the cycles queued matvecs write their results and, for
EW and COMB, its own result words (one VRF write a word, hw/chip_collect.py) are written; matvec results
wait for the op's own writes (perf/vrf_port.py).
The sequencer overheads (``SeqOverheads``) are of three kinds, marked per field: states of the control
FSM, pipeline depths named on the hardware classes (``ElemFeeder`` / ``WordFeeder.LATENCY``,
``MacInput.LATENCY``, ``RegFifo.LATENCY``, ``MemEngine.REQ_LATENCY`` / ``RSP_LATENCY``,
``LogitsWriter.FIRST_BEAT``; read from them), and the empirical ones, ``FITTED``: read
with verification/phase_monitor.py off one run, ``FITTED_RUN`` (nano-g128-s48-long), as the measured op
cycles minus the engine formula. With them every op of that run is predicted to the cycle except EMB's
wait, whose read latency is jitter; on the tiny chip the first position's first RMS can end a cycle away
(the ROM check, not the tensor block, ends its load). verification/held_out.py scores the model on runs it
was not read from (nano and tiny, both groups, stretched lengths, other seeds, two other lane
configurations; ``make bench`` prints the table).

Load phase: header (256 B), descriptor table and tensor block, each one read request stream through the
16 B port at one beat a cycle plus the read latency (SPEC §3: base + jitter, in order); position 0's
token read follows the tensor block's last beat. Beside it runs the ROM check (``hw.rom_check.RomCheck``:
a cycle per word of every ROM, from RUN); the first position waits for it, so a load phase shorter than
the check (the tiny chip's) lasts as long as the check (the wait is charged to ``load.tokens``, the last
region the monitor saw). Per position: 128 logits write beats (drained by the logits writer, from the
head op into the next position), one argmax word (END) and the next position's read beats (token, .s, .z, .q row: 5 on nano).
"""
from __future__ import annotations

import functools
from dataclasses import dataclass, field

from hw.chip_collect import MV_QUEUE
from hw.chip_dispatch import RegFifo
from hw.chip_glue import Combine, ElemFeeder, WordFeeder
from hw.kda_engine import KdaEngine, KdaParams
from hw.kda_params import Sel as KdaSel
from hw.logits_writer import BEAT_LOGITS, LogitsWriter
from hw.mac_array import MacArray, store_block
from hw.mac_input import MacInput
from hw.mem_engine import MemEngine
from hw.mla_params import MlaParams
from hw.moe_router import MoeRouter
from hw.norm_unit import NormUnit
from hw.params import ChipParams
from hw.program import LANES, PRF_READERS, Op, Opc, program_for
from hw.res_mixer import ResMixer
from hw.rom_check import RomCheck
from hw.sequencer import chip_build
from hw.vector_unit import Elementwise
from nano_k3.config import ModelConfig, preset
from nano_k3.mem_timing import LONG_RUN
from perf.vrf_port import share_vrf

# Engine constants come from the engine classes themselves (importing them elaborates nothing).
MAC_LATENCY = MacArray.LATENCY
NORM_GAP = NormUnit.GAP
EW_LATENCY = Elementwise.LATENCY
COMB_LATENCY = Combine.LATENCY


@dataclass(frozen=True)
class ChipPerfParams:
    """The hardware numbers the model needs (``chip_perf_params`` reads them from a chip build)."""

    mac_lanes: int               # W = 16 · weight-store banks (hw.mac_array.mac_array_params_for)
    banks: int                   # weight-store banks: beats per store read
    scale_lanes: int             # MAC s·d multipliers: columns scaled per cycle (MacArrayParams.scale_lanes)
    norm_lanes: int              # RMSNorm elements per cycle (hw.params.ChipParams.norm_lanes)
    ew_lanes: int                # element-wise elements per cycle (hw.params.ChipParams.ew_lanes)
    mix_lanes: int               # residual-mixer elements per cycle (hw.params.ChipParams.mix_lanes)
    comb_lanes: int              # MoE-combine elements per cycle (hw.params.ChipParams.comb_lanes)
    kda_lanes: int               # KDA engine input elements per cycle (hw.params.ChipParams.kda_lanes)
    clock_hz: float              # 1 / hw.params.ChipParams.clock_ns
    out_lanes: int = LANES       # MAC results per output transfer (= VRF word)
    lw_depth: int = LogitsWriter.DEPTH      # logits writer FIFO, in chunks of out_lanes logits
    mem_base: int = LONG_RUN.base       # SPEC §3 read latency (long profile): base + uniform [0, jitter]
    mem_jitter: int = LONG_RUN.jitter
    rom_check: int | None = None        # cycles of the ROM check (hw.rom_check.RomCheck.cycles of the build's ROMs)

    def __post_init__(self) -> None:
        for k in ("mac_lanes", "banks", "out_lanes", "scale_lanes", "norm_lanes", "ew_lanes", "mix_lanes", "comb_lanes"):
            v = getattr(self, k)
            if not isinstance(v, int) or v < 1 or v & (v - 1):
                raise ValueError(f"{k} must be a power of two >= 1, got {v!r}")
        if self.scale_lanes > self.mac_lanes:
            raise ValueError(f"scale_lanes must be at most mac_lanes={self.mac_lanes}, got {self.scale_lanes}")
        for k in ("mem_base", "mem_jitter"):
            if not isinstance(getattr(self, k), int) or getattr(self, k) < 0:
                raise ValueError(f"{k} must be an integer >= 0, got {getattr(self, k)!r}")


# Sequencer overhead per op class beyond the engine formulas above. Each field is one of three kinds:
#   [fsm] states of the control FSM (hw/chip_dispatch.py, hw/sequencer.py) every op of the class passes
#         through, a cycle each;
#   [hw]  a pipeline depth named on the hardware class that builds it (read from the class here, so a
#         change of the RTL's constant changes the model);
#   [fit] empirical: the measured op cycles minus the engine formula, read off the fitted run
#         (``FITTED_RUN``) and listed in ``FITTED``. verification/held_out.py checks them on runs they were
#         not read from (other chips, lane counts, groups, lengths, seeds).
@dataclass(frozen=True)
class SeqOverheads:
    mv: int = 1 + MacInput.LATENCY   # [fsm, hw] an MV that feeds its activations: DISPATCH (the block exponent from
                                 # the slot's OR, the feed's first read), and MV_CONV waits for MacInput's output
                                 # register after the feed (``mv_feed``), then queues the command; its
                                 # command is taken in its last cycle (its store records were prefetched
                                 # while the op before it ran)
    keep_cmd: int = 1            # [fsm] a keep MV's command is queued after DISPATCH, in MV_CMD, and taken once
                                 # the MAC array has issued the previous matvec
    mac_next: int = 1            # [fit] the MAC array takes the next command issue + 1 cycles after the last one
    mac_lock: int = 2            # [fit] its store read port is free (PLD reads) issue + 2 cycles after a command
    pld_read: int = 1            # [fit] a PLD's first store read: the cycle after its command (port free)
    pld_write: int = 3           # [fit] readers may start this many cycles after its last store read
    pld_release: int = 3         # [fit] the MAC array takes a command again this many cycles after the last read
    mv_done: int = 1             # [fit] the last result is written; the queue is empty one cycle later
    res_word: int = 1            # [fit] a residual matvec: each result word waits a cycle for p's word
    act_cmd: int = 0             # [fit] an MV started while the array issues: its convert pass (one transfer a
                                 # word) waits for the array, its command queued in the cycle of the last word
    cmd_fifo: int = RegFifo.LATENCY      # [hw] a queued command reaches the MAC array (hw/chip_dispatch.py)
    mac_input_pass: int = WordFeeder.LATENCY     # [hw] per WordFeeder → MacInput pass, beyond one cycle a word
    full_block: int = -1         # [fit] fan_out ≥ W: the last block's results leave one cycle earlier than
                                 # issue + LATENCY + chunks − 1 (MacArray docstring: 64→64 measured 46): its
                                 # second scale read ends the issue one cycle after the last q read
    pld: int = 1                 # [fsm] DISPATCH requests the copy, which runs in the background
    fetch: int = 1               # [fsm] FETCH: a position's first op is read from the ROM (counted in that op)
    first_records: int = 1       # [fit] ... and if it is an MV or PLD, its store records are read meanwhile: its
                                 # DISPATCH waits one cycle more for them
    records: int = 1             # [hw] an MV or PLD right after a PLD (one cycle, in which the descriptor banks are
                                 # read for the next op) waits this long for its store records (``pf_q``)
    emb: int = 1                 # [fsm] EMB beyond its d/16 VRF word writes (EMB_W): DISPATCH, where it waits
                                 # for its row
    # A read's pipeline (hw/mem_engine.py, hw/emb_fetch.py), the fetch's two round trips:
    req_path: int = MemEngine.REQ_LATENCY      # [hw] a read range taken by the memory engine reaches the port
    rsp_path: int = MemEngine.RSP_LATENCY + 1  # [hw] a response due at cycle c is on the engine's ``o`` in c + 1,
                                 # in the fetcher's registers at the end of c + 1 (EmbFetch's capture): it acts at c + 2
    load_exit: int = 3           # [fit] the first position's FETCH: 3 cycles after the last tensor beat is due
                                 # (response slot, TENS_WAIT's last cycle, ROM_WAIT)
    lw_first: int = LogitsWriter.FIRST_BEAT    # [hw] a chunk pushed into the logits writer leaves as its first beat
    elem: int = ElemFeeder.LATENCY               # [fsm, hw] element ops: the feeder's pipeline from DISPATCH (its first
                                 # read); an op that collects results ends in the cycle of its last one
    route: int = 1               # [fit] ROUTE beyond elem: the router's experts to the collector
    kda_seg: int = 1 + ElemFeeder.LATENCY        # [fsm, hw] a KDA feed segment beyond its transfers: DISPATCH, the feed
    mla_seg: int = 1 + WordFeeder.LATENCY        # [fsm, hw] an MLA feed segment beyond its words: DISPATCH, the feed
    mla_last: int = 2            # [fit] the last MLA segment beyond the engine's attention cycles
    end: int = 2                 # [fsm] END: DISPATCH, END (the argmax word's write, taken at once)
    load_step: int = 3           # [fit] per load request: REQ state + CHECK/next-state transitions
    finish: int = 4              # [fit] STATUS write, DRAIN, RSP after the last position


# The empirical constants ([fit] above) and the run they were read from: the SPEC §8 throughput run
# (verification/held_out.py FITTED_RUN; the bench's first run). Everything else is the hardware's.
FITTED = ("mac_next", "mac_lock", "pld_read", "pld_write", "pld_release", "mv_done", "res_word", "act_cmd",
          "full_block", "first_records", "load_exit", "route", "mla_last", "load_step", "finish")
FITTED_RUN = "nano-g128-s48-long"


@dataclass(frozen=True)
class OpCost:
    index: int
    opc: str
    name: str
    phase: str
    cycles: int


def op_phase(ops: list[Op]) -> list[str]:
    """Phase of each op: embed, L<i>.<kda|mla> (norm1 + projections + engine + o), L<i>.resmix
    (residual mixes and adds), L<i>.router (norm2, router, bias, top-k), L<i>.experts, final (last mix
    and norm), head (the LM head matvec with its logits writes), argmax (END)."""
    out, cur = [], "embed"
    for op in ops:
        n = op.name
        if op.opc == Opc.END:
            cur = "argmax"
        elif n == "emb":
            cur = "embed"
        elif n == "head":
            cur = "head"
        elif n.startswith(("res_out", "final_norm")):
            cur = "final"
        elif n.startswith("L"):
            layer, rest = n.split(".", 1)
            if rest.startswith(("res_attn", "res_mlp")):
                cur = f"{layer}.resmix"
            elif rest.startswith(("norm1", "kda", "mla")):
                cur = f"{layer}.mixer"
            elif rest.startswith(("norm2", "moe.router", "moe.bias")):
                cur = f"{layer}.router"
            elif rest.startswith("moe."):
                cur = f"{layer}.experts"
        out.append(cur)
    return out


@dataclass
class _Cmd:
    """A matvec on the MAC array's timeline: queued at ``push``, taken at ``cmd``."""
    dst: int | None
    push: int
    issue: int                     # store-port cycles (MacArrayParams.issue_cycles)
    latency: int                   # command taken -> result written (0: the head, which waits itself)
    res: bool = False              # a residual matvec: DISPATCH starts nothing but a PLD until it is written
    fan_out: int = 0
    cmd: int = 0

    @property
    def done(self) -> int:
        return self.cmd + self.latency if self.latency else 0


@dataclass(frozen=True)
class PerfModel:
    cfg: ModelConfig
    hw: ChipPerfParams = field(default_factory=lambda: chip_perf_params("nano"))
    seq: SeqOverheads = field(default_factory=SeqOverheads)

    @functools.cached_property
    def kda(self) -> KdaParams:
        return KdaParams.for_model(self.cfg, self.hw.kda_lanes)

    @functools.cached_property
    def ops(self) -> tuple:
        return program_for(self.cfg).ops

    @functools.cached_property
    def head_op(self) -> Op:
        return next(op for op in self.ops if op.opc == Opc.MV and op.head)

    @functools.cached_property
    def op_phases(self) -> list[str]:
        return op_phase(list(self.ops))

    @functools.cached_property
    def rom_check(self) -> int:
        """Cycles from RUN to the ROM check's ``done`` (``RomCheck.cycles`` of the build's ROMs; without
        ``ChipPerfParams.rom_check``, those of the chip preset named like the model)."""
        if self.hw.rom_check is not None:
            return self.hw.rom_check
        from hw.params import preset as chip_preset
        return RomCheck.cycles(chip_build(chip_preset(self.cfg.name)).rom_images)

    # --- engine formulas ------------------------------------------------------------------------
    def scale_steps(self, fan_out: int) -> int:
        """= hw.mac_array.MacArrayParams.scale_steps: S4 cycles of one (block, group)."""
        return max(1, min(fan_out, self.hw.mac_lanes) // self.hw.scale_lanes)

    def issue_cycles(self, fan_in: int, fan_out: int) -> int:
        """= hw.mac_array.MacArrayParams.issue_cycles with the effective group min(group, fan_in)."""
        W, g = self.hw.mac_lanes, min(self.cfg.group_size, fan_in)
        F = 1 if fan_out >= W else min(W // fan_out, g // 2)
        s_reads = 2 if min(fan_out, W) == W else 1
        return max(1, fan_out // W) * (fan_in // g) * max((g // 2) // F + 1 + s_reads, self.scale_steps(fan_out))

    def mv_feed(self, op: Op) -> int:
        """One WordFeeder pass through MacInput (its block exponent comes with DISPATCH); none for a keep MV."""
        return 0 if op.keep else -(-op.fan_in // LANES) + self.seq.mac_input_pass

    def _chunks_full(self, op: Op) -> tuple[int, int]:
        """Result transfers of the last column block, and the full-block correction (``SeqOverheads``)."""
        return (-(-min(op.fan_out, self.hw.mac_lanes) // self.hw.out_lanes),
                self.seq.full_block if op.fan_out >= self.hw.mac_lanes else 0)

    def mac_cycles(self, op: Op) -> int:
        """Command taken → the matvec's last result written to the VRF (non-head), no stalls."""
        chunks, full = self._chunks_full(op)
        return (self.issue_cycles(op.fan_in, op.fan_out) + MAC_LATENCY
                + max(self.scale_steps(op.fan_out), chunks) - 1 + full)

    def head_cycles(self, op: Op) -> int:
        """The LM head MV, first cycle to last: its command is taken ``cmd_fifo`` after the op's would-be last
        cycle (``mv``), and it ends when its last chunk enters the logits writer."""
        return self.seq.mv + self.seq.cmd_fifo + self.mv_feed(op) + self.head_chunks[0]

    @functools.cached_property
    def head_chunks(self) -> tuple[int, int]:
        """The LM head's results through the logits writer (hw/logits_writer.py), from its command taken:
        (the last chunk pushed, the first cycle with every beat handed to the port). A chunk leaves the
        MAC array as a VRF-bound matvec's result would (``mac_cycles``: column blocks ``issue / blocks``
        apart, a block's chunks one a cycle) unless the writer's FIFO (``lw_depth`` chunks) is full. The
        FIFO's SRAM is read for every beat, a cycle before it leaves, from ``lw_first`` − 1 cycles after the
        chunk's push on, but not in a push cycle (one port, docs/pnr.md): no beat leaves after a push. The
        argmax word (END, ``end`` cycles after the last push) takes the port for a cycle."""
        s, W, OL, op = self.seq, self.hw.mac_lanes, self.hw.out_lanes, self.head_op
        blocks, per_block = max(1, op.fan_out // W), -(-min(op.fan_out, W) // OL)
        ipb, last = self.issue_cycles(op.fan_in, op.fan_out) // blocks, self.mac_cycles(op)
        beats = OL // BEAT_LOGITS
        due = [last - (blocks - 1 - b) * ipb - (per_block - 1 - j) for b in range(blocks) for j in range(per_block)]
        push: list[int] = []
        c, popped, sent, ready, argmax = due[0], 0, 0, False, None
        while sent < beats * len(due):
            held = sum(p < c for p in push) - popped                  # chunks in the FIFO (a register)
            take = len(push) < len(due) and due[len(push)] <= c and held < self.hw.lw_depth
            out = ready and c != argmax                               # a beat leaves
            pop = out and sent % beats == beats - 1
            readable = sum(p <= c + 1 - s.lw_first for p in push) - popped - pop
            ready = readable > 0 and not take                         # read now, the beat leaves next cycle
            sent, popped = sent + out, popped + pop
            if take:
                push.append(c)
                argmax = c + s.end if len(push) == len(due) else None
            c += 1
        return push[-1], c - push[-1]

    def expected_jitter(self, reads: int, late: tuple[int, ...] = ()) -> float:
        """E[max over ``reads`` reads of a SPEC §3 jitter draw, uniform in 0..J, + ``late[k]``]: the wait beyond
        ``base`` + k of the last of ``reads`` reads requested one a cycle, read k ``late[k]`` cycles after its
        turn (none by default; responses cannot overtake each other)."""
        J, late = self.hw.mem_jitter, tuple(late) + (0,) * (reads - len(late))

        def below(m: int) -> float:                         # P(every read's draw + late < m)
            p = 1.0
            for d in late:
                p *= min(1.0, max(0.0, (m - d) / (J + 1)))
            return p
        return sum(1 - below(m) for m in range(1, J + max(late) + 1))

    def fetch_ready(self, t: int) -> int:
        """The cycle of position t (its FETCH = 0) from which EMB finds its embedding row (hw/emb_fetch.py):
        two round trips through the port, each ``req_path`` + SPEC §3 latency (base + the expected jitter)
        + ``rsp_path``: the token's beat, then the row's .s, .z and .q beats, requested back to back.
        Position 0's token beat is due right behind the tensor block's last beat (``load_exit`` before its
        FETCH); a later position's token is requested in the cycle before its FETCH (END's argmax write),
        and its row's reads share the port with the previous position's logits beats still draining
        (``head_chunks``): the memory engine alternates the two, so read k of the row waits for up to k beats."""
        s, hw = self.seq, self.hw
        nb = 2 + self.cfg.d_model // 32
        late: tuple[int, ...] = ()
        if t == 0:
            tok_due = 1 - s.load_exit
        else:
            tok_due = -1 + s.req_path + hw.mem_base + self.expected_jitter(1)
            row_read = tok_due + s.rsp_path + s.req_path        # the row's first read at the port
            drain_end = self.head_chunks[1] - 1 - s.end   # after the head's last push, FETCH's cycle
            late = tuple(min(k, max(0, round(drain_end - 1 - row_read))) for k in range(nb))
        row_due = tok_due + s.rsp_path + s.req_path + nb - 1 + hw.mem_base + self.expected_jitter(nb, late)
        return round(row_due + s.rsp_path)

    def mix_cycles(self, n_cands: int, d: int) -> int:
        return ResMixer.latency(n_cands, d, self.hw.mix_lanes)

    def router_cycles(self) -> int:
        """The experts after MoeRouter.choice_latency(E): ROUTE ends with them."""
        return MoeRouter.choice_latency(self.cfg.n_experts)

    def router_weights(self) -> int:
        """Cycles from ROUTE's end to its last weight collected: the first pair MoeRouter.latency(E) after the
        first element, the other top_k − 1 one a cycle."""
        return MoeRouter.latency(self.cfg.n_experts) + self.cfg.top_k - 1 - self.router_cycles()

    def mla_attention(self, t: int) -> int:
        """hw.mla_params.MlaParams.attention_cycles(t): after the MLA segment ops fed the position."""
        c = self.cfg
        return MlaParams.for_model(c, LANES).attention_cycles(t, c.mla_heads, c.mla_dk, c.mla_dr, c.mla_dv)

    def op_cycles(self, op: Op, t: int) -> int:
        """Cycles of one op at position t (0-based), its first cycle to its last (in which the next op is
        loaded from the micro-program ROM), started with no matvec in flight
        (``position`` adds the waits for earlier matvecs)."""
        s, c = self.seq, self.cfg
        if op.opc == Opc.MV:
            return self.head_cycles(op) if op.head else (s.keep_cmd + 1 if op.keep else s.mv + self.mv_feed(op))
        if op.opc == Opc.PLD:
            return s.pld
        if op.opc == Opc.EMB:
            return s.emb + c.d_model // LANES
        if op.opc == Opc.RMS:
            return s.elem + 2 * (op.n // self.hw.norm_lanes) + NORM_GAP - 1
        word_reads = (len(op.srcs) - 1) * -(-op.n // LANES)     # interleaved feeds: ns reads per 16 elements
        if op.opc == Opc.MIX:
            return s.elem + self.mix_cycles(len(op.srcs), op.n) + word_reads
        if op.opc in (Opc.EW, Opc.COMB):
            feed = op.n // (self.hw.ew_lanes if op.opc == Opc.EW else self.hw.comb_lanes) + word_reads
            return s.elem + feed + (EW_LATENCY if op.opc == Opc.EW else COMB_LATENCY)
        if op.opc == Opc.ROUTE:
            return s.elem + s.route + self.router_cycles()
        if op.opc == Opc.KDA:
            return s.kda_seg + -(-op.n // self.hw.kda_lanes) + (KdaEngine.z_drain(self.kda) - 1 if op.last else 0)
        if op.opc == Opc.MLA:
            return (s.mla_last + op.nw + self.mla_attention(t)) if op.last else s.mla_seg + op.nw
        if op.opc == Opc.END:
            return s.end
        raise ValueError(f"no cycle formula for op {op.listing()}")

    # --- phases ----------------------------------------------------------------------------------
    def position(self, t: int) -> list[OpCost]:
        """Every op's cycles at position t, on a timeline (hw/sequencer.py): a non-head MV ends once its
        command is queued; the MAC array takes queued commands in order, and their results drain into
        the VRF while the next ops run. An op waits for the results its sources (and, if it writes the
        VRF, its destination) are still owed; a non-keep MV's activations wait for the array to finish
        every queued command; the head, EMB and END wait for every result. A PLD's copy runs in the
        background once the array leaves the store port, and the array takes no queued command until it
        is done; the PRF readers and the next PLD wait for it."""
        s = self.seq
        now, pld_done, kda_state_end, kda_q_end, weights_in = 0, 0, 0, 0, 0
        pld_busy = (0, 0)                  # the array takes no command while a PLD copies
        cmds: list[_Cmd] = []              # matvecs in command order (the last: the array's latest)
        out = []

        def after(c: _Cmd | None, gap: int) -> int:
            return c.cmd + c.issue + gap if c else 0

        def take(c: _Cmd, free: int) -> None:
            """The array takes command c once queued, free and not held by a PLD copy."""
            c.cmd = max(c.push + s.cmd_fifo, free)
            if pld_busy[0] <= c.cmd < pld_busy[1]:
                c.cmd = pld_busy[1]

        for k, (op, ph) in enumerate(zip(self.ops, self.op_phases)):
            cost = base = self.op_cycles(op, t)
            owed = [(c.dst, c.done) for c in cmds if c.done > now]
            res_owed = [c.done for c in cmds if c.res and c.done > now]
            if k == 0:
                cost += s.fetch + (s.first_records if op.opc in (Opc.MV, Opc.PLD) else 0)
            waits_all = op.opc in (Opc.EMB, Opc.END) or op.opc == Opc.MV and op.head
            writes = op.opc in (Opc.RMS, Opc.MIX, Opc.EW, Opc.COMB) or op.opc in (Opc.KDA, Opc.MLA) and op.last
            wait = [0]                                      # DISPATCH waits for ...
            if op.opc in PRF_READERS or op.opc == Opc.PLD:
                wait.append(pld_done - now)                 # ... the PLD copy in flight
            if op.opc in (Opc.MV, Opc.PLD) and k > 0 and self.ops[k - 1].opc == Opc.PLD:
                wait.append(s.records)                      # ... its store records
            if op.opc != Opc.PLD:
                wait += [d - now for d in res_owed]         # ... a residual matvec's results
            if waits_all:
                wait += [d - now for _, d in owed]          # ... every matvec result
            if op.opc == Opc.COMB:
                wait.append(weights_in - now)               # ... the router's weights
            if op.opc == Opc.EMB:
                wait.append(self.fetch_ready(t) - now)      # ... its embedding row
            elif not (op.opc == Opc.MV and op.keep or op.opc == Opc.PLD):
                hazards = set(op.srcs) | ({op.dst} if writes else set())
                wait += [d - now for x, d in owed if x in hazards]     # ... the results it depends on
            cost += max(wait)
            cost += share_vrf(self, op, now + cost - base,            # the feed's first issue: in DISPATCH
                              [c for c in cmds if c.latency and c.done > now])
            if op.opc == Opc.KDA:                           # the rows start after K, V, B, F; pass 2 needs Q
                if op.last:                                 # (it ends in the cycle of the last output)
                    cost = max(cost, kda_state_end + KdaEngine.drain(self.kda) - 1 - now,
                               kda_q_end + KdaEngine.q_drain(self.kda) - 1 - now)
                elif op.sel == KdaSel.Q:
                    kda_q_end = now + cost
                else:
                    kda_state_end = now + cost
            if op.opc == Opc.ROUTE:
                weights_in = now + cost + self.router_weights()
            if op.opc == Opc.PLD:                           # requested in the op's last cycle
                req = now + cost - 1
                taken = [c for c in cmds if c.cmd <= req]
                first = max(req + s.pld_read, after(taken[-1] if taken else None, s.mac_lock))
                pld_done = first + -(-op.nbeats // self.hw.banks) - 1 + s.pld_write
                pld_busy = (req, pld_done - s.pld_write + s.pld_release)
                free = after(taken[-1] if taken else None, s.mac_next)
                for c in cmds[len(taken):]:                 # queued commands wait for the copy
                    take(c, free)
                    free = after(c, s.mac_next)
            if op.opc == Opc.MV:
                mac_free = after(cmds[-1] if cmds else None, s.mac_next)
                if op.keep:                                 # queued after DISPATCH (and its waits)
                    push = now + cost - base + s.keep_cmd
                else:                                       # its activations enter once the array is free
                    push = max(now + cost - 1, mac_free + -(-op.fan_in // LANES) + s.act_cmd)
                while not op.head and sum(d > push for _, d in owed) >= MV_QUEUE:
                    push = min(d for _, d in owed if d > push)          # the result queue is full
                c = _Cmd(op.dst, push, self.issue_cycles(op.fan_in, op.fan_out),
                         0 if op.head else self.mac_cycles(op) + s.mv_done
                         + (s.res_word * -(-op.fan_out // LANES) if op.res else 0), bool(op.res), op.fan_out)
                take(c, mac_free)
                cmds = [x for x in cmds if x.done > now] + [c]
                if not op.head:
                    cost = push - now + 1
            out.append(OpCost(k, op.opc.name, op.name, ph, cost))
            now += cost
        return out

    def load(self, seq_len: int) -> dict[str, int]:
        """Load-phase cycles per region, as the phase monitor charges them (the region of the last read the
        port took): header and descriptors, one read stream each, a beat a cycle plus the read latency;
        the tensor block a beat a cycle, until position 0's token read follows its last beat; then that
        beat's latency and ``load_exit`` until position 0's FETCH ("tokens")."""
        from nano_k3.image import plan_layout
        lay = plan_layout(self.cfg, seq_len)
        _, first, end = store_block(self.cfg, self.cfg.group_size)
        lat = self.hw.mem_base + self.hw.mem_jitter
        out = {k: b + lat + self.seq.load_step for k, b in (("header", 16), ("descriptors", lay.n_records))}
        out["tensors"] = (end - first) // 16
        out["tokens"] = lat + self.seq.load_exit - 1
        out["tokens"] += max(0, self.rom_check - sum(out.values()))
        return out

    def phases(self, seq_len: int) -> dict[str, int]:
        """Cycles of the whole run by phase: load.<region>, every op phase summed over positions, finish
        (the status word waits for the last position's logits beats to leave the logits writer)."""
        if not isinstance(seq_len, int) or not 1 <= seq_len <= self.cfg.max_seq:
            raise ValueError(f"seq_len must be an integer in 1..{self.cfg.max_seq}, got {seq_len!r}")
        out = {f"load.{k}": v for k, v in self.load(seq_len).items()}
        for t in range(seq_len):
            for oc in self.position(t):
                out[oc.phase] = out.get(oc.phase, 0) + oc.cycles
        out["finish"] = self.seq.finish + max(0, self.head_chunks[1] - self.seq.end - 1)
        return out

    def total(self, seq_len: int) -> int:
        return sum(self.phases(seq_len).values())

    def cycles_per_token(self, seq_len: int) -> float:
        return self.total(seq_len) / seq_len

    def tokens_per_s(self, seq_len: int) -> float:
        return self.hw.clock_hz / self.cycles_per_token(seq_len)

    def write_beats(self, seq_len: int) -> int:
        """Logits rows (4·vocab bytes each), one argmax word per position, the status word."""
        return seq_len * (4 * self.cfg.vocab // 16 + 1) + 1

    def read_beats(self, seq_len: int) -> int:
        from nano_k3.image import plan_layout
        lay = plan_layout(self.cfg, seq_len)
        _, first, end = store_block(self.cfg, self.cfg.group_size)
        return 16 + lay.n_records + (end - first) // 16 + seq_len * (1 + 2 + self.cfg.d_model // 32)


def chip_perf_params(config: str | ChipParams = "nano", **override) -> ChipPerfParams:
    """The model's hardware numbers of a chip build (``hw.params.ChipParams``, or the name of its preset), with
    ``override``."""
    from hw.mac_array import mac_array_params_for
    from hw.params import preset as chip_preset
    chip = config if isinstance(config, ChipParams) else chip_preset(config)
    mp = mac_array_params_for(chip)
    return ChipPerfParams(**{**dict(mac_lanes=mp.lanes, banks=mp.store.banks, scale_lanes=mp.scale_lanes,
                                    norm_lanes=chip.norm_lanes, ew_lanes=chip.ew_lanes, mix_lanes=chip.mix_lanes,
                                    comb_lanes=chip.comb_lanes, kda_lanes=chip.kda_lanes, clock_hz=1e9 / chip.clock_ns,
                                    rom_check=RomCheck.cycles(chip_build(chip).rom_images)),
                             **override})


def model_for(config: str | ChipParams = "nano", group: int | None = None, **hw) -> PerfModel:
    """The model of a chip build (``hw.params.ChipParams``, or the preset of that name) running its model
    (``ChipParams.model``) at ``group``; ``hw`` overrides."""
    cfg = preset(config) if isinstance(config, str) else config.model
    cfg = cfg if group is None else cfg.with_group(group)
    return PerfModel(cfg, chip_perf_params(config, **hw))
