"""Decoder-order monitor: no position's input is read from memory before the previous position's output.

A real decoder feeds its own argmax back: position t + 1's token does not exist until position t's argmax
word is written. The chip must therefore not read position t + 1's entry of the token array, nor the
embedding row of its token, before position t's argmax word has been accepted by the memory port. This
module checks that on the port's log of one run (``verification.chip_tb.ChipMemory`` records every accepted
read and write with its cycle), for any chip, from the image layout and the token array alone:

* ``argmax_cycles``: per position t, the cycle its argmax word (4 bytes at ``argmax_addr + 4t``, every byte
  strobed) was first accepted. Positions 0..n have *started* at cycle c when the argmax words of 0..n − 1
  were all accepted before c (position 0 always has).
* ``InputMap``: which positions' inputs a 16 B read beat holds: entries of the token array, or the
  ``emb.q`` row / ``emb.s`` / ``emb.z`` entries (SPEC §4.3, token-major) of a token some position has.
* Rule 1 (look-ahead): a read that holds inputs of some positions must hold an input of a started one.
  Beats are 16 B, so the beat read for position t also holds its neighbours' entries; rule 1 lets that
  pass, and rule 2 closes the gap. One exception: the embedding table is weights, and a chip may read all
  of it up front (the rows it then holds do not depend on any token): an early read of an ``emb.q`` /
  ``.s`` / ``.z`` beat is no look-ahead at position p when every beat of that table was read before p
  started (a sweep; the protocol fixture's tensor stream is one). The token array has no such exception.
* Rule 2 (no carried-over token ids): every position t ≥ 1 whose token entry the chip reads at all has a
  read of it after position t − 1's argmax word (its token may not come from a beat read earlier, for a
  position before it). Rows are not held to this: reusing a row already read is no look-ahead.

``monitor`` returns the per-position record and every violation; ``check_decoder_order`` turns it into
the run's ``decoder_order`` check (``verification.chip_tb.check_run`` applies it to every run). Reads of
rows of tokens no position has, and of everything else (header, descriptors, the tensors after the
embedding table), are not position inputs and are ignored.
"""
from __future__ import annotations

import bisect
from dataclasses import dataclass, field

import numpy as np

from hw.mac_array import EMB_RECORDS
from nano_k3.image import ImageLayout

BEAT = 16
ARGMAX_BYTES = 4


@dataclass(frozen=True)
class Violation:
    rule: str                 # "look-ahead" or "carried-over"
    position: int             # the position whose input was read too early (or not re-read)
    cycle: int | None         # the offending read's cycle (None: no read in its own turn)
    addr: int | None
    what: str                 # "token entry" / "emb.q row" / ...
    allowed_from: int | None  # the cycle position − 1's argmax word was accepted (None: never)

    def describe(self) -> str:
        after = (f"position {self.position - 1}'s argmax word was accepted at cycle {self.allowed_from}"
                 if self.allowed_from is not None else f"position {self.position - 1}'s argmax word was never written")
        if self.rule == "look-ahead":
            return (f"{self.what} of position {self.position} read at cycle {self.cycle} (address {self.addr:#x}), "
                    f"but {after}")
        return (f"position {self.position}'s token entry is never read after its predecessor's argmax word "
                f"({after}); its last read was at cycle {self.cycle}")


@dataclass
class DecoderOrder:
    """What the monitor saw: per position, its argmax cycle and when its input was read; the violations."""
    argmax: list                                        # per position: cycle of its argmax word or None
    first_input_read: list                              # per position: its first token entry / row read after
                                                        # the previous position's argmax word (None: none)
    violations: list[Violation] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return not self.violations

    def min_gap(self) -> tuple[int, int] | None:
        """(position t ≥ 1, cycles from position t − 1's argmax word to t's first input read), the smallest."""
        gaps = [(r - self.argmax[t - 1], t) for t, r in enumerate(self.first_input_read)
                if t >= 1 and r is not None and self.argmax[t - 1] is not None]
        if not gaps:
            return None
        g, t = min(gaps)
        return t, g


def argmax_cycles(layout: ImageLayout, writes) -> list[int | None]:
    """Per position, the cycle its argmax word was first accepted (every one of its bytes strobed)."""
    out: list[int | None] = [None] * layout.seq_len
    for cycle, addr, _, strb in writes:
        lo = addr - layout.argmax_addr
        if lo + BEAT <= 0 or lo >= ARGMAX_BYTES * layout.seq_len:
            continue
        for t in range(max(0, lo // ARGMAX_BYTES), min(layout.seq_len, (lo + BEAT) // ARGMAX_BYTES)):
            off = ARGMAX_BYTES * t - lo
            if off >= 0 and strb >> off & 0xF == 0xF and out[t] is None:
                out[t] = cycle
    return out


class InputMap:
    """Which positions' inputs a read beat holds (see the module docstring)."""

    def __init__(self, layout: ImageLayout, tokens: np.ndarray):
        cfg = layout.cfg
        self.layout, self.tokens = layout, [int(v) for v in tokens]
        g = min(cfg.group_size, cfg.d_model)
        groups = -(-cfg.d_model // g)
        width = {"emb.q": cfg.d_model // 2, "emb.s": 2 * groups, "emb.z": groups}     # bytes per token
        self.tables = [(n, layout.descriptor(n).addr, width[n]) for n in EMB_RECORDS]
        self.table_beats = {n: set(range(a - a % BEAT, a + w * cfg.vocab, BEAT)) for n, a, w in self.tables}
        self.positions_of: dict[int, list[int]] = {}
        for t, v in enumerate(self.tokens):
            self.positions_of.setdefault(v, []).append(t)

    def table_of(self, addr: int) -> str | None:
        """The embedding-table record (``emb.q`` / ``.s`` / ``.z``) whose data the beat at ``addr`` holds."""
        return next((n for n, beats in self.table_beats.items() if addr in beats), None)

    def positions(self, addr: int) -> tuple[str, list[int]]:
        """(what, positions) whose input the beat at ``addr`` holds; ("", []) for none."""
        lay = self.layout
        lo = addr - lay.tokens_addr
        if -BEAT < lo < 4 * lay.seq_len:
            first = max(0, lo) // 4
            return "token entry", list(range(first, min(lay.seq_len, (lo + BEAT + 3) // 4)))
        for name, base, w in self.tables:
            end = base + w * lay.cfg.vocab
            if addr + BEAT > base and addr < end:
                v_lo, v_hi = max(0, (addr - base) // w), min(lay.cfg.vocab - 1, (addr + BEAT - 1 - base) // w)
                ps = sorted(t for v in range(v_lo, v_hi + 1) for t in self.positions_of.get(v, ()))
                return (f"{name} row" if name == "emb.q" else f"{name} entry"), ps
        return "", []


def monitor(layout: ImageLayout, tokens: np.ndarray, reads, writes) -> DecoderOrder:
    """Check one run's port log (``reads``: (cycle, addr); ``writes``: (cycle, addr, wdata, wstrb), each in
    acceptance order) against both rules."""
    am = argmax_cycles(layout, writes)
    T = layout.seq_len
    # started_by[n] = the cycle from which positions 0..n have started (every argmax word before n accepted)
    started_by: list[float] = [0.0]
    for t in range(1, T):
        prev = am[t - 1]
        started_by.append(float("inf") if prev is None else max(started_by[-1], prev + 1))
    imap = InputMap(layout, tokens)
    res = DecoderOrder(am, [None] * T)
    token_reads: list[list[int]] = [[] for _ in range(T)]
    first_read: dict[int, int] = {}
    for cycle, addr in reads:
        first_read.setdefault(addr, cycle)
    swept = {n: max(first_read[b] for b in beats) if beats <= first_read.keys() else float("inf")
             for n, beats in imap.table_beats.items()}       # when every beat of the table had been read
    for cycle, addr in reads:
        what, ps = imap.positions(addr)
        if not ps:
            continue
        for p in ps:
            turn = p == 0 or am[p - 1] is not None and cycle > am[p - 1]
            if turn and res.first_input_read[p] is None:
                res.first_input_read[p] = cycle
            if what == "token entry":
                token_reads[p].append(cycle)
        n = bisect.bisect_right(started_by, cycle) - 1        # positions 0..n have started
        p = min(ps)
        table = imap.table_of(addr)
        if p > n and not (table is not None and swept[table] < started_by[p]):
            res.violations.append(Violation("look-ahead", p, cycle, addr, what, am[p - 1]))
    for t in range(1, T):
        if token_reads[t] and (am[t - 1] is None or max(token_reads[t]) <= am[t - 1]):
            res.violations.append(Violation("carried-over", t, max(token_reads[t]), None, "token entry", am[t - 1]))
    return res


def check_decoder_order(layout: ImageLayout, final_mem: bytes, reads: list[tuple[int, int]],
                        writes: list[tuple[int, int, int, int]]):
    """The run's ``decoder_order`` check (a ``chip_tb.Check``, in every run's report, every profile): no token
    entry or embedding row of position t + 1 read before position t's argmax word was accepted."""
    from verification.chip_tb import Check
    tokens = np.frombuffer(final_mem, "<u4", count=layout.seq_len, offset=layout.tokens_addr)   # (T,)
    res = monitor(layout, tokens, reads, writes)
    if not res.passed:
        return Check("decoder_order", False, f"{res.violations[0].describe()}; {len(res.violations)} violation(s) "
                                             f"(a decoder reads position t + 1's input only after t's argmax word)")
    gap = res.min_gap()
    if gap is None:
        return Check("decoder_order", True, f"{layout.seq_len} positions: no token entry or embedding row read "
                                            f"after position 0's, nothing to order")
    t, g = gap
    return Check("decoder_order", True, f"{layout.seq_len} positions: every token entry / embedding row read after "
                                        f"the previous position's argmax word (closest: position {t}, {g} cycle"
                                        f"{'s' if g != 1 else ''} after position {t - 1}'s)")
