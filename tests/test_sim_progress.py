"""verification/chip_sim.py's progress echo: every run's lines are headed "run k of n", counted from each
run's first line, so make demo's status line (flow/runlog.py COUNT) shows how many runs are done."""
from flow.runlog import COUNT
from verification.chip_sim import _Follow


def test_progress_lines_count_the_runs(tmp_path, capsys):
    log = tmp_path / "run.log"
    log.write_text("\n".join([
        "  0.00ns INFO cocotb.chip  nano-g128-s48-long: image and references ready in 0.1 s",
        "  0.00ns INFO cocotb.chip  nano-g128-s48-long: RUN accepted at cycle 0",
        "  9.00ns INFO cocotb.chip  something else",
        "  9.00ns INFO cocotb.chip  nano-g64-s64-long: image and references ready in 0.1 s",
        "  9.00ns INFO cocotb.chip  nano-g64-s64-long: simulated 5000 cycles",
        ""]))
    f = _Follow(log, "sim", 2, 8)          # two runs of eight before these (another process ran them)
    f.done.set()
    f.run()
    lines = capsys.readouterr().out.splitlines()
    assert [COUNT.search(ln).groups() for ln in lines] == [("3", "8"), ("3", "8"), ("4", "8"), ("4", "8")]
    assert lines[0] == "  [sim] run 3 of 8: nano-g128-s48-long: image and references ready in 0.1 s"
