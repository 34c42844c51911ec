"""flow.fork: a call in a forked child sees this process's data, returns its value, and fails loudly."""
import os

import pytest

from flow.fork import ForkError, beside
from flow.place_netlist import PlaceError

BIG = list(range(100_000))          # data the child reads without it being pickled


def _sum_and_pid(extra: int) -> tuple[int, int]:
    return sum(BIG) + extra, os.getpid()


def _fails():
    raise PlaceError("the child's own error")


def _unpicklable_error():
    class Local(Exception):
        pass
    raise Local("a local class does not pickle")


def _dies():
    os._exit(3)


def test_the_child_reads_this_process_and_answers():
    total, pid = beside(_sum_and_pid, 7).result()
    assert total == sum(BIG) + 7 and pid != os.getpid()


def test_two_children_run_side_by_side_and_the_parent_goes_on(tmp_path):
    a, b = beside(_sum_and_pid, 1), beside(_sum_and_pid, 2)
    assert sum(BIG) > 0                                       # the parent works meanwhile
    assert a.result()[0] + 1 == b.result()[0]


def test_the_childs_exception_is_raised_here():
    with pytest.raises(PlaceError, match="the child's own error"):
        beside(_fails).result()


def test_an_exception_that_does_not_pickle_arrives_as_text():
    with pytest.raises(ForkError, match=r"_unpicklable_error failed in a forked process:(.|\n)*Local"):
        beside(_unpicklable_error).result()


def test_a_child_that_dies_is_reported_with_its_exit_code():
    with pytest.raises(ForkError, match="ended without an answer .exit code 3"):
        beside(_dies).result()


def test_without_the_memory_for_a_copy_the_call_runs_here():
    total, pid = beside(_sum_and_pid, 1, copies=1 << 62).result()      # more than any machine has
    assert total == sum(BIG) + 1 and pid == os.getpid()
    with pytest.raises(PlaceError, match="the child's own error"):
        beside(_fails, copies=1 << 62).result()


def test_children_running_count_against_the_memory_for_the_next():
    from flow.fork import Beside, mem_available
    first = beside(_sum_and_pid, 0, copies=mem_available() // 2)
    second = beside(_sum_and_pid, 0, copies=mem_available() // 2 + (1 << 30))     # does not fit beside it
    assert second.result()[1] == os.getpid() and first.result()[1] != os.getpid()
    assert Beside.reserved == 0


def test_collector_paused_inside_and_restored_after():
    import gc
    from flow.cli import collector_paused

    @collector_paused()
    def inside():
        return gc.isenabled()

    assert gc.isenabled() and inside() is False and gc.isenabled()
    with pytest.raises(ValueError):
        with collector_paused():
            raise ValueError("the collector comes back on an exception too")
    assert gc.isenabled()
