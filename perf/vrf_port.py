"""The VRF's one port in the performance model (perf/model.py).

Place and route build the VRF from single-ported fakeram45 macros, which drop a read beside a write
(docs/pnr.md), so the chip never reads and writes it in one cycle: writes go first and a feed's VRF read
waits (hw/chip_glue.py, ``vrf_wr``). While an op's feed runs, the VRF is written by the result words of the
matvecs still queued and, for EW and COMB, by the op's own result words (one write a word,
hw/chip_collect.py); matvec results in turn wait for the op's own writes.

    share_vrf(model, op, first, cmds) -> the cycles op's feed waited (the matvecs' completions move)
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Sequence

from hw.chip_glue import Combine, ElemFeeder
from hw.mac_array import MacArray
from hw.program import LANES, Op, Opc
from hw.vector_unit import Elementwise

if TYPE_CHECKING:
    from perf.model import PerfModel, _Cmd

# The units whose results come a fixed latency after their input, so they are written while the feed runs.
OWN_WRITE_LATENCY = {Opc.EW: Elementwise.LATENCY, Opc.COMB: Combine.LATENCY}


def feed_issues(model: PerfModel, op: Op) -> list[tuple[bool, bool]]:
    """The VRF side of ``op``'s feed, one issue a cycle when nothing holds it: (the issue reads the VRF, its
    transfer completes a word of the op's results). The ElemFeeder reads each source's word at every 16
    elements (``ns`` issues, the last with the word's first transfer) and takes the word's other transfers
    from its registers; the WordFeeder reads a word an issue (an MV's pass, an MLA segment)."""
    hw = model.hw
    if op.opc == Opc.MV:
        return [] if op.keep else [(True, False)] * -(-op.fan_in // LANES)
    if op.opc == Opc.MLA:
        return [(True, False)] * op.nw
    if op.opc not in (Opc.RMS, Opc.MIX, Opc.EW, Opc.COMB, Opc.ROUTE, Opc.KDA):
        return []
    K = {Opc.RMS: hw.norm_lanes, Opc.MIX: hw.mix_lanes, Opc.EW: hw.ew_lanes, Opc.COMB: hw.comb_lanes,
         Opc.KDA: hw.kda_lanes}.get(op.opc, 1)
    per_word, transfers, out = max(1, LANES // K), op.n // K, []
    for w in range(-(-op.n // LANES)):
        k = min(per_word, transfers - w * per_word)                 # the word's transfers
        out += [(True, False)] * (len(op.srcs) - 1) + [(True, k == 1)] + [(False, j == k - 1) for j in range(1, k)]
    return out


def feed_holds(model: PerfModel, op: Op, first: int, written: set[int]) -> tuple[int, set[int]]:
    """The feed of ``op`` from its first issue in cycle ``first``: a VRF read waits while the VRF is written
    (``written``: matvec results; an EW's or COMB's own result words, written ``ElemFeeder.LATENCY`` + the
    unit's latency after the issue of the transfer that completes them). Returns the cycles the reads waited and
    the op's own write cycles."""
    lat = OWN_WRITE_LATENCY.get(op.opc)
    issues = feed_issues(model, op)
    c, own = first, set()
    for reads, word_end in issues:
        while reads and (c in written or c in own):
            c += 1
        if word_end and lat is not None:
            own.add(c + ElemFeeder.LATENCY + lat)
        c += 1
    return c - first - len(issues), own


def mv_writes(model: PerfModel, cmds: Sequence[_Cmd], busy: set[int]) -> tuple[list[int], set[int]]:
    """Queued matvecs' result words against the running op's own VRF writes (``busy``, which go first): each
    word that falls on one of them moves its matvec's completion a cycle later; the matvec after a held one
    leaves the result buffer ``MacArray.DRAIN`` cycles after the held one's last word (hw/mac_array.py).
    Returns each matvec's delay and the cycles its last column block's words are written."""
    shifts, writes, held = [], set(), None
    for c in cmds:
        n_words = -(-min(c.fan_out, model.hw.mac_lanes) // LANES)
        end = c.done - model.seq.mv_done
        shift = 0 if held is None else max(0, held + MacArray.DRAIN + n_words - 1 - end)
        for t in range(end - n_words + 1, end + 1):
            while t + shift in busy:
                shift += 1
            writes.add(t + shift)
        shifts.append(shift)
        held = end + shift if shift else None          # a held block: the next one waits for its buffer
    return shifts, writes


def share_vrf(model: PerfModel, op: Op, first: int, cmds: Sequence[_Cmd]) -> int:
    """The VRF port while ``op``'s feed runs from cycle ``first`` beside the queued matvecs ``cmds``: the op's
    own writes, then matvec results, then its reads. Moves the matvecs' completions (``_Cmd.latency``);
    returns the cycles the op's reads waited."""
    busy: set[int] = set()
    while True:                  # the op's writes move matvec words, which move its reads and its writes
        shifts, writes = mv_writes(model, cmds, busy)
        holds, own = feed_holds(model, op, first, writes)
        if own == busy:
            break
        busy = own
    for c, shift in zip(cmds, shifts):
        c.latency += shift
    return holds
