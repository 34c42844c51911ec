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

Code: this file composes the array; hw/mac_params.py holds its parameters and stream layouts, hw/mac_front.py
the activation registers, the read sequencer and stage D, hw/mac_reduce.py S2 .. R3.
"""
from __future__ import annotations

import dataclasses
from types import SimpleNamespace

from amaranth.hdl import Module, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from hw.mac_front import activation_regs, products, read_sequencer, stage_d
from hw.mac_params import MacArrayParams, act_layout, cmd_layout, out_layout
from hw.mac_reduce import accumulate, fold_and_scale, group_sums, requantise
from hw.params import ChipParams, log2, require_instance
from hw.weight_store import BEAT_BYTES, WeightStore, WeightStoreParams, read_cmd_layout, read_data_layout, \
    write_layout
from nano_k3 import fxp_ops
from nano_k3.config import GROUP_SIZES


class MacArray(wiring.Component):
    """Weight store + INT4 dequant-MAC array (see the module docstring)."""

    LATENCY = 9    # command -> last result, beyond the store-port cycles (see the module docstring)
    DRAIN = 3      # a block's results leave the result buffer through R1, R2, R3: the next block's first
                   # transfer comes 3 cycles after a stalled block's last one was taken

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
        W, LW, NB = p.lanes, log2(p.lanes), p.store.banks
        A = fxp_ops.A
        abits = A.bits

        store = m.submodules.store = WeightStore(p.store)
        wiring.connect(m, wiring.flipped(self.w), store.w)
        wiring.connect(m, wiring.flipped(self.r_cmd), store.i)
        wiring.connect(m, store.o, wiring.flipped(self.r_data))
        port = store.r

        adv = Signal()          # the main pipeline (I .. S5) moves this cycle
        ctx = SimpleNamespace(core=self, p=p, wd=wd, W=W, LW=LW, NB=NB, A=A, abits=abits, port=port, adv=adv)
        for part in (activation_regs, read_sequencer, stage_d, products, group_sums, fold_and_scale, accumulate,
                     requantise):
            part(m, ctx)
        return m


# ---- build registry hooks (rtl_gen.emit BLOCKS entry) ------------------------------------------------
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
    return max(first - table for table, first, _ in (store_block(cfg, g) for g in GROUP_SIZES))


def mac_array_params_for(chip: ChipParams) -> MacArrayParams:
    """The MAC array of a chip build: ``chip.mac_banks`` lane groups, sizes from its model (both group sizes)."""
    from nano_k3.tensors import MatSpec, tensor_specs
    cfg = chip.model
    mats = [s for s in tensor_specs(cfg) if isinstance(s, MatSpec) and not s.emb]
    beats = max((end - first) // BEAT_BYTES for _, first, end in (store_block(cfg, g) for g in GROUP_SIZES))
    pow2 = lambda v: 1 << (v - 1).bit_length()      # noqa: E731
    return MacArrayParams(store=WeightStoreParams(banks=chip.mac_banks, beats=beats),
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
