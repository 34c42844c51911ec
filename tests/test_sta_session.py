"""flow/sta_session.py: commands sent ahead (``submit``) are answered in order before the next ``run``, and a
failure among them is raised, not lost."""
import pytest

from flow.sta_session import StaSession, StaSessionError


def test_submitted_commands_finish_before_the_next_run(tmp_path):
    with StaSession(tmp_path / "s.log") as sta:
        sta.submit("set a 6")
        sta.submit("set b [expr {$a * 7}]")
        assert sta.run('puts "b=$b"').strip() == "b=42"
        sta.drain()                                    # nothing pending: returns at once
        assert sta.value("[expr {$b + 1}]") == 43.0
    assert "### set a 6" in (tmp_path / "s.log").read_text()


def test_a_failed_submitted_command_is_raised_by_the_next_run(tmp_path):
    with StaSession(tmp_path / "s.log") as sta:
        sta.submit("error {no such design}")
        with pytest.raises(StaSessionError, match="no such design"):
            sta.run('puts "after"')
        assert sta.run('puts "later"').strip() == "later"      # the session goes on
