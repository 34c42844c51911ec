"""perf/vrf_port.py: the VRF's one port in the performance model, on hand-worked cases (the model as a whole
is checked against recorded RTL runs in tests/test_perf_model.py).

Nano's lanes: ew 4, comb 2, kda 2; 16 elements a VRF word; ``ElemFeeder.LATENCY`` 3, ``Elementwise.LATENCY`` 9.
"""
from __future__ import annotations

from hw.program import Op, Opc
from perf.model import _Cmd, model_for
from perf.vrf_port import feed_holds, feed_issues, mv_writes, share_vrf

NANO = model_for("nano", 128)
FIRST = 100                                      # the feed's first issue


def test_feed_issues_read_each_source_word_once():
    # EW of 2 sources, 32 elements, 4 a transfer: per word 2 reads (the second with the first transfer), 3 more
    # transfers; the word's last transfer completes a result word
    ew = feed_issues(NANO, Op(Opc.EW, srcs=(1, 2), dst=3, n=32))
    assert ew == [(True, False), (True, False), (False, False), (False, False), (False, True)] * 2
    # KDA, one source, 64 elements, 2 a transfer: a read every 8 issues, 32 issues
    kda = feed_issues(NANO, Op(Opc.KDA, srcs=(1,), n=64))
    assert len(kda) == 32 and [k for k, (r, _) in enumerate(kda) if r] == [0, 8, 16, 24]
    # an MV's pass reads its fan-in's words; a keep MV and a PLD read nothing
    assert feed_issues(NANO, Op(Opc.MV, srcs=(1,), fan_in=64, fan_out=64)) == [(True, False)] * 4
    assert feed_issues(NANO, Op(Opc.MV, srcs=(1,), fan_in=64, fan_out=64, keep=1)) == []
    assert feed_issues(NANO, Op(Opc.PLD)) == []


def test_reads_wait_for_writes_and_push_the_rest_of_the_feed():
    kda = Op(Opc.KDA, srcs=(1,), n=64)                      # reads at FIRST + 0, 8, 16, 24 when nothing holds
    assert feed_holds(NANO, kda, FIRST, set()) == (0, set())
    assert feed_holds(NANO, kda, FIRST, {FIRST + 1, FIRST + 7})[0] == 0          # no read in those cycles
    # the first read waits 2 cycles, which moves word 1's read to FIRST + 10, where it waits once more
    assert feed_holds(NANO, kda, FIRST, {FIRST, FIRST + 1, FIRST + 10})[0] == 3


def test_own_result_words_hold_a_later_read():
    # EW of 2 sources, 64 elements: word w's issues at FIRST + 5w .. 5w + 4, its result word written
    # 3 - 1 + 9 = 11 cycles after its last transfer (FIRST + 5w + 15): word w + 3's first read, which waits
    holds, own = feed_holds(NANO, Op(Opc.EW, srcs=(1, 2), dst=3, n=64), FIRST, set())
    assert holds == 1
    assert own == {FIRST + 15, FIRST + 20, FIRST + 25, FIRST + 31}       # word 3 issued a cycle late


def test_matvec_words_yield_to_own_writes_and_hold_reads():
    # one matvec (64 outputs: 4 VRF words) whose last word would be written at FIRST + 9 (done - mv_done)
    done = FIRST + 9 + NANO.seq.mv_done
    assert mv_writes(NANO, [_Cmd(5, 0, 1, done, fan_out=64)], set()) == ([0], {FIRST + 6, FIRST + 7, FIRST + 8,
                                                                              FIRST + 9})
    assert mv_writes(NANO, [_Cmd(5, 0, 1, done, fan_out=64)], {FIRST + 7}) == ([1], {FIRST + 6, FIRST + 8,
                                                                                  FIRST + 9, FIRST + 10})
    # a KDA feed beside it: word 1's read at FIRST + 8 waits for the matvec's words (8, 9), the matvec keeps
    # its completion (the KDA op writes nothing while it feeds)
    cmd = _Cmd(5, 0, 1, done, fan_out=64)
    assert share_vrf(NANO, Op(Opc.KDA, srcs=(1,), n=64), FIRST, [cmd]) == 2
    assert cmd.done == done
