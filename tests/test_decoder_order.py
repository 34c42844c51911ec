"""verification/decoder_order.py on synthetic memory-port logs (no simulator): a decoder's order passes, every
way of reading a position's input early fails with the position, the rule and the cycles named."""
from __future__ import annotations

import numpy as np
import pytest

from nano_k3.config import TINY
from nano_k3.image import plan_layout
from verification.decoder_order import InputMap, argmax_cycles, check_decoder_order, monitor

T = 6
LAYOUT = plan_layout(TINY, T)          # tiny: d_model 32 (a 16 B .q row), vocab 64, one scale group a row
# positions 2 and 3 share an .s beat (tokens 8..15) and a .z beat (0..15); token 40 appears twice
TOKENS = np.array([40, 3, 9, 14, 40, 63])
LOAD_END = 1_000                       # the load phase's reads happen before this cycle
POS_CYCLES = 100                       # a position's length in the synthetic runs


def _beat(addr: int) -> int:
    return addr - addr % 16


def row_beats(v: int) -> list[int]:
    """The .s beat, the .z beat and the .q row beats of token v (SPEC §4.3, tiny: one group a row)."""
    d = TINY.d_model
    q, s, z = (LAYOUT.descriptor(n).addr for n in ("emb.q", "emb.s", "emb.z"))
    return [_beat(s + 2 * v), _beat(z + v)] + list(range(q + v * d // 2, q + (v + 1) * d // 2, 16))


def token_beat(t: int) -> int:
    return _beat(LAYOUT.tokens_addr + 4 * t)


def argmax_write(cycle: int, t: int, strb: int | None = None) -> tuple[int, int, int, int]:
    a = LAYOUT.argmax_addr + 4 * t
    return cycle, _beat(a), 0, (0xF << (a % 16)) if strb is None else strb


def load_phase_reads() -> list[tuple[int, int]]:
    """Header, descriptors and the tensor block: no position's input."""
    first = LAYOUT.descriptors[3].addr
    return [(k, 16 * k) for k in range(16)] + [(100 + k, first + 16 * k) for k in range(200)]


def decoder_run(fetch_delay: int = 1) -> tuple[list, list]:
    """The chip's order: position t's token beat, then its row, ``fetch_delay`` cycles after t − 1's argmax."""
    reads, writes = load_phase_reads(), []
    for t in range(T):
        start = LOAD_END if t == 0 else writes[-1][0] + fetch_delay
        reads.append((start, token_beat(t)))
        reads += [(start + 30 + k, a) for k, a in enumerate(row_beats(int(TOKENS[t])))]
        writes.append(argmax_write(start + POS_CYCLES, t))
    return reads, writes


def test_input_map_names_positions():
    imap = InputMap(LAYOUT, TOKENS)
    assert imap.positions(token_beat(0)) == ("token entry", [0, 1, 2, 3])
    assert imap.positions(token_beat(5)) == ("token entry", [4, 5])
    assert imap.positions(row_beats(40)[2]) == ("emb.q row", [0, 4])
    assert imap.positions(row_beats(9)[0]) == ("emb.s entry", [2, 3])        # tokens 8..15 share the beat
    assert imap.positions(row_beats(3)[1]) == ("emb.z entry", [1, 2, 3])     # tokens 0..15
    assert imap.positions(row_beats(20)[2]) == ("emb.q row", [])             # no position has token 20
    assert imap.positions(0) == ("", [])                                     # the header


def test_argmax_word_counts_only_when_every_byte_is_strobed():
    writes = [argmax_write(10, 0, strb=0x7), argmax_write(20, 0), argmax_write(30, 1), argmax_write(40, 1)]
    assert argmax_cycles(LAYOUT, writes)[:3] == [20, 30, None]


def test_decoder_order_passes():
    reads, writes = decoder_run()
    res = monitor(LAYOUT, TOKENS, reads, writes)
    assert res.passed, [v.describe() for v in res.violations]
    assert res.argmax == [w[0] for w in writes]
    assert res.min_gap() == (1, 1)
    check = check_decoder_order(LAYOUT, _memory(), reads, writes)
    assert check.passed and check.name == "decoder_order" and "closest: position 1, 1 cycle after position 0's" in check.message


def test_row_read_one_cycle_before_the_argmax_fails():
    reads, writes = decoder_run()
    am2 = writes[2][0]
    reads.append((am2 - 1, row_beats(int(TOKENS[3]))[2]))      # position 3's .q row, a cycle early
    reads.sort()
    res = monitor(LAYOUT, TOKENS, reads, writes)
    (v,) = res.violations
    assert (v.rule, v.position, v.cycle, v.what, v.allowed_from) == ("look-ahead", 3, am2 - 1, "emb.q row", am2)
    check = check_decoder_order(LAYOUT, _memory(), reads, writes)
    assert not check.passed
    assert f"emb.q row of position 3 read at cycle {am2 - 1}" in check.message
    assert f"position 2's argmax word was accepted at cycle {am2}" in check.message


def test_token_read_in_the_argmax_cycle_fails():
    """Reads and writes share one request channel: a read in the write's own cycle cannot follow it."""
    reads, writes = decoder_run()
    am3, am4 = writes[3][0], writes[4][0]
    reads = [(c - 1 if a == token_beat(4) and am3 < c < am4 else c, a) for c, a in reads]   # a cycle earlier
    res = monitor(LAYOUT, TOKENS, sorted(reads), writes)
    assert [(v.rule, v.position) for v in res.violations] == [("look-ahead", 4)]


def test_load_phase_prefetch_fails():
    """The old chip: every token id and every row read in the load phase."""
    reads = load_phase_reads()
    reads += [(900 + k, token_beat(4 * k)) for k in range(2)]
    reads += [(910 + 8 * t + k, a) for t in range(T) for k, a in enumerate(row_beats(int(TOKENS[t])))]
    writes = [argmax_write(LOAD_END + POS_CYCLES * (t + 1), t) for t in range(T)]
    res = monitor(LAYOUT, TOKENS, reads, writes)
    assert not res.passed
    first = res.violations[0]
    assert (first.rule, first.position, first.what) == ("look-ahead", 4, "token entry")   # beat 1: entries 4, 5
    assert {v.position for v in res.violations if v.what == "emb.q row"} == {1, 2, 3, 5}  # 4's row is 0's too


def test_carried_over_token_ids_fail():
    """One token beat read at position 0 serves positions 0..3: legal reads, but 1..3 took no turn of their own."""
    reads, writes = decoder_run()
    reads = [(c, a) for c, a in reads if not (a == token_beat(0) and c > LOAD_END)]
    res = monitor(LAYOUT, TOKENS, reads, writes)
    assert [(v.rule, v.position) for v in res.violations] == [("carried-over", 1), ("carried-over", 2),
                                                               ("carried-over", 3)]
    assert "position 1's token entry is never read after its predecessor's argmax word" in \
        res.violations[0].describe()


def test_missing_argmax_word_blocks_later_positions():
    reads, writes = decoder_run()
    del writes[1]                            # position 1's argmax word never written
    res = monitor(LAYOUT, TOKENS, reads, writes)
    assert res.violations and res.violations[0].position == 2 and res.violations[0].allowed_from is None
    assert "position 1's argmax word was never written" in res.violations[0].describe()


def table_sweep(first_cycle: int, skip: int | None = None) -> list[tuple[int, int]]:
    """Every beat of emb.q, emb.s and emb.z in order (as the protocol fixture's tensor stream reads them)."""
    lo = LAYOUT.descriptor("emb.q").addr
    hi = LAYOUT.descriptors[3].addr
    return [(first_cycle + k, a) for k, a in enumerate(range(lo, hi, 16)) if a != skip]


def test_full_table_sweep_is_weights_not_look_ahead():
    """Reading the whole embedding table up front singles out no token (the old-old chip held it on chip)."""
    reads, writes = decoder_run()
    reads = sorted(reads + table_sweep(500))
    res = monitor(LAYOUT, TOKENS, reads, writes)
    assert res.passed, [v.describe() for v in res.violations]


def test_sweep_missing_a_row_is_look_ahead():
    reads, writes = decoder_run()
    missing = row_beats(20)[2]                              # a row no position needs: the sweep is not whole
    reads = sorted(reads + table_sweep(500, skip=missing))
    res = monitor(LAYOUT, TOKENS, reads, writes)
    assert {v.position for v in res.violations} == {1, 2, 3, 5}
    assert {v.what for v in res.violations} == {"emb.q row"}    # .s / .z were swept whole


def test_token_array_read_up_front_is_look_ahead():
    """The token array is the future inputs themselves: reading all of it early is never exempt."""
    reads, writes = decoder_run()
    reads = sorted(reads + [(600, token_beat(0)), (601, token_beat(4))])
    res = monitor(LAYOUT, TOKENS, reads, writes)
    assert [(v.rule, v.position, v.cycle) for v in res.violations] == [("look-ahead", 4, 601)]


@pytest.mark.parametrize("delay", [1, 40])
def test_shared_beats_of_a_started_position_pass(delay):
    """The .s beat read for position 2 also holds position 3's scale: it serves a started position."""
    reads, writes = decoder_run(fetch_delay=delay)
    assert monitor(LAYOUT, TOKENS, reads, writes).passed


def _memory() -> bytes:
    """A memory image holding TOKENS in the token array (all check_decoder_order reads of it)."""
    mem = bytearray(LAYOUT.size)
    mem[LAYOUT.tokens_addr:LAYOUT.tokens_addr + 4 * T] = TOKENS.astype("<u4").tobytes()
    return bytes(mem)
