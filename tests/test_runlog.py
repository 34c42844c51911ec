"""flow.runlog (make demo's steps: own logs, one status line, runtime record), its line in the closing
summary, the prefixed coloquinte report of flow.place_flat and the per-test durations of make test."""
import io
import json
import re
import shlex
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from flow.report import brief, load
from flow.runlog import Step, Terminal, combined_status, main, run, runtime_text, step_status

PY = sys.executable


def _cmd(code: str) -> str:
    return f"{PY} -c {shlex.quote(textwrap.dedent(code))}"


# Two steps side by side that write half lines, a progress count and a summary on stdout, at the same time.
CHATTY = """
import sys, time
for i in range(1, 4):
    print(f"[{NAME}] part {i} of 3", file=sys.stderr, flush=True)
    sys.stdout.write("{NAME} half "); sys.stdout.flush(); time.sleep(0.15); print("{NAME} whole")
print("{NAME} summary")
"""


def _run_main(tmp_path, *args, every="0.2"):
    out = io.StringIO()
    rc = run_with(out, ["--logs", str(tmp_path / "logs"), "--every", every, *args])
    return rc, out.getvalue()


def run_with(out, argv):
    saved = sys.stdout
    sys.stdout = out
    try:
        return main(argv)
    finally:
        sys.stdout = saved


def test_side_by_side_steps_keep_their_own_logs_and_whole_lines(tmp_path):
    rc, text = _run_main(tmp_path, "--step", "first", _cmd("print('first summary')"),
                         "--step", "sta", _cmd(CHATTY.replace("{NAME}", "sta")),
                         "--beside", "place", _cmd(CHATTY.replace("{NAME}", "place")))
    assert rc == 0
    logs = tmp_path / "logs"
    for name, other in (("sta", "place"), ("place", "sta")):
        log = (logs / f"{name}.log").read_text()
        assert log.count(f"{name} half {name} whole") == 3 and f"{other} half" not in log and f"[{other}]" not in log
        assert log.rstrip().splitlines()[-1].startswith("# exit status 0 after")
    lines = text.splitlines()
    # every line is one of runlog's own: a start, a status, an end, a summary line, the side-by-side note
    allowed = re.compile(r"^(first|sta|place): |^  \.\. |^  (first|sta|place) |^sta and place side by side")
    assert all(allowed.match(ln) for ln in lines), lines
    assert lines.count("  sta summary") == 1 and lines.count("  place summary") == 1
    assert lines.count("  first summary") == 1
    assert not any("[sta]" in ln and "[place]" in ln for ln in lines)
    record = json.loads((logs / "runtime.json").read_text())
    assert [(s["name"], s["group"], s["status"]) for s in record["steps"]] == \
        [("first", 0, "ok"), ("sta", 1, "ok"), ("place", 1, "ok")]
    assert record["wall_s"] >= 0.45 and all(s["seconds"] >= 0 for s in record["steps"])


def test_a_failed_step_shows_its_log_tail_and_stops_the_run(tmp_path):
    fail = "import sys; print('flow.synth: error: bad cell', file=sys.stderr); print('x\\n' * 30); sys.exit(3)"
    rc, text = _run_main(tmp_path, "--step", "synth", _cmd(fail), "--step", "place", _cmd("print('never')"))
    assert rc == 1
    lines = text.splitlines()
    at = lines.index("  flow.synth: error: bad cell")      # named first, though the tail no longer holds it
    assert lines[at - 1].startswith("synth: FAILED (exit status 3) after 0:0") and "never" not in text
    assert lines[at + 1] == f"  the last lines of {tmp_path / 'logs' / 'synth.log'}:" and lines[at + 2] == "  | x"
    assert "runtime: synth 0:00 (failed), place not run; total" in text
    record = json.loads((tmp_path / "logs" / "runtime.json").read_text())
    assert [s["status"] for s in record["steps"]] == ["failed", "not run"]


def test_progress_count_and_estimate_from_the_previous_run(tmp_path):
    step = Step("place", ["x"], 0, tmp_path / "place.log", previous_s=100.0, start=0.0)
    step.take("[place] region core: global placement done (6 of 12 regions)\n", stdout=False)
    assert step_status(step, 61.0).startswith("place 1:01 [#####-----] 6/12 region core:")
    assert step.results == []
    step.take("[place] legalisation ...\n", stdout=False)
    assert step_status(step, 40.0).startswith("place 0:40 [####------] ~40 %")
    assert step_status(step, 500.0).startswith("place 8:20 [##########] ~99 %")     # never claims done
    step.take("wrote build/place/place.json\n", stdout=True)
    assert step.results == ["wrote build/place/place.json"] and step.count is None     # a count is one line's
    step.take("[place] step 9 of 4\n", stdout=False)
    assert step.count is None
    other = Step("sta", ["y"], 0, tmp_path / "sta.log", start=0.0)
    line = combined_status([step, other], 3725.0, 60)
    assert len(line) <= 60 and "place 1:02:05" in line and " | sta 1:02:05" in line


def test_into_a_file_the_status_is_printed_when_it_changed_or_once_a_minute(monkeypatch):
    out = io.StringIO()
    term = Terminal(out, tty=False, every=10.0)
    term.printed_at = 0.0
    term.status("place 0:05 global", 5.0)          # too soon after the last line
    term.status("place 0:11 global", 11.0)
    term.status("place 0:25 global", 25.0)         # the same but for the clock
    term.status("place 1:12 global", 72.0)         # a minute without a line
    assert out.getvalue().splitlines() == ["  .. place 0:11 global", "  .. place 1:12 global"]


def test_on_a_terminal_the_status_is_redrawn_in_place():
    out = io.StringIO()
    term = Terminal(out, tty=True, every=10.0)
    term.status("sta 0:01 slow", 1.0)
    term.line("synth: done")
    term.clear()
    assert out.getvalue() == "\r\x1b[Ksta 0:01 slow\r\x1b[Ksynth: done\nsta 0:01 slow\r\x1b[K"


def test_command_line_errors(tmp_path, capsys):
    with pytest.raises(SystemExit):
        main(["--logs", str(tmp_path), "--beside", "place", "true"])
    assert "--beside needs a --step before it" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["--logs", str(tmp_path), "--step", "a", "true", "--step", "a", "true"])
    assert "step names must differ" in capsys.readouterr().err
    assert run([], tmp_path, Terminal(io.StringIO(), False, 1.0)) == 0


def test_a_missing_program_is_named(tmp_path):
    with pytest.raises(SystemExit, match="cannot start step sim: no-such-tool-xyz"):
        run_with(io.StringIO(), ["--logs", str(tmp_path), "--step", "sim", "no-such-tool-xyz --x"])


def test_closing_summary_has_the_runtime_and_the_report(tmp_path):
    record = {"wall_s": 3723.0, "steps": [
        {"name": "synth", "group": 0, "status": "ok", "seconds": 600.0},
        {"name": "sta", "group": 1, "status": "ok", "seconds": 65.0},
        {"name": "place", "group": 1, "status": "ok", "seconds": 3000.0},
        {"name": "report", "group": 2, "status": "ok", "seconds": 58.0}]}
    assert runtime_text(record) == "synth 10:00, sta 1:05 beside place 50:00, report 0:58; total 1:02:03 wall clock"
    report = tmp_path / "report" / "report.md"
    lines = brief(load(tmp_path / "build"), record, report).splitlines()
    assert lines[-2] == f"runtime    : {runtime_text(record)}"
    assert lines[-1] == f"report     : not written ({report} not found; `make report` writes it)"
    report.parent.mkdir()
    report.write_text("# report\n")
    assert brief(load(tmp_path / "build"), record, report).splitlines()[-1] == f"report     : {report}"


def test_report_brief_reads_the_runtime_record(tmp_path):
    rec = tmp_path / "runtime.json"
    rec.write_text(json.dumps({"wall_s": 5.0, "steps": [{"name": "rtl", "group": 0, "status": "ok", "seconds": 5}]}))
    out = subprocess.run([PY, "-m", "flow.report", "--build", str(tmp_path), "--out", str(tmp_path / "r"), "--brief",
                          "--runtime", str(rec)], capture_output=True, text=True, check=True).stdout
    assert "runtime    : rtl 0:05; total 0:05 wall clock" in out and "report     : not written" in out
    bad = subprocess.run([PY, "-m", "flow.report", "--build", str(tmp_path), "--brief", "--runtime",
                          str(tmp_path / "none.json")], capture_output=True, text=True)
    assert bad.returncode == 1 and "cannot read the runtime record" in bad.stderr


COLOQUINTE = """
import ctypes, os, sys
from flow.place_flat import coloquinte_report_as_progress
libc = ctypes.CDLL(None)
with coloquinte_report_as_progress():
    os.write(1, b"#1: UB 10 Dist 3 LB 7\\n")
    libc.printf(b"#2: UB 9 Dist 2 LB 8\\n")          # C stdio, buffered (not a terminal)
print("after", flush=True)
"""


def test_coloquinte_report_is_prefixed_on_stderr():
    proc = subprocess.run([PY, "-c", COLOQUINTE], capture_output=True, text=True, check=True)
    assert proc.stdout == "after\n"
    assert proc.stderr.splitlines() == ["[place] coloquinte: #1: UB 10 Dist 3 LB 7",
                                        "[place] coloquinte: #2: UB 9 Dist 2 LB 8"]


def test_make_test_lines_name_each_test_with_its_duration(tmp_path):
    (tmp_path / "test_x.py").write_text("import time\ndef test_quick():\n    pass\n"
                                        "def test_slow():\n    time.sleep(0.3)\n")
    out = subprocess.run([PY, "-m", "pytest", "-v", "-p", "flow.pytest_progress", "-p", "no:cacheprovider",
                          str(tmp_path / "test_x.py")], capture_output=True, text=True, cwd=tmp_path).stdout
    assert re.search(r"test_x.py::test_quick PASSED +\[ 50%\] \(0\.0 s\)", out), out
    assert re.search(r"test_x.py::test_slow PASSED +\[100%\] \(0\.[3-9] s\)", out), out


def test_make_test_workers_start_the_long_files_first(tmp_path):
    """flow.pytest_schedule: under xdist's file scheduling the files named by long_files run before the others,
    in that order, although xdist would take the files with most tests first."""
    for name, n in (("test_many.py", 5), ("test_one.py", 1), ("test_two.py", 2)):
        (tmp_path / name).write_text("".join(f"def test_{k}():\n    pass\n" for k in range(n)))
    (tmp_path / "pytest.ini").write_text("[pytest]\nlong_files =\n    test_two.py\n    test_one.py\n")
    out = subprocess.run([PY, "-m", "pytest", "-v", "-p", "flow.pytest_schedule", "-p", "no:cacheprovider",
                          "-n", "1", "--dist", "loadfile"], capture_output=True, text=True, cwd=tmp_path).stdout
    order = [m.group(1) for m in re.finditer(r"PASSED (test_\w+)\.py::", out)]
    assert "scheduling tests via LongFilesFirst" in out, out
    assert order == ["test_two"] * 2 + ["test_one"] + ["test_many"] * 5, out


def test_a_long_summary_is_cut_on_the_terminal_and_whole_in_the_log(tmp_path):
    rc, text = _run_main(tmp_path, "--step", "sta", _cmd("for i in range(50): print(f'path {i}')"))
    assert rc == 0
    assert "  path 39" in text and "  path 40" not in text
    assert f"  ... 10 more lines in {tmp_path / 'logs' / 'sta.log'}" in text
    assert "path 49" in (tmp_path / "logs" / "sta.log").read_text()


def test_make_demo_runs_the_chain_alone_then_the_diagnostics():
    """The steps of `make demo` (make -n): one flow.runlog call, no sub-make (which re-ran synthesis and printed
    its summary a second time); synthesis, placement without its own STA and its files (only the state sign-off
    reads) and sign-off each alone; then the synthesis STA beside the placement's STA (which writes the
    placement's files first), one OpenSTA each; the nets between regions (flow.boundaries); the summary with
    the runtime record."""
    repo = Path(__file__).resolve().parents[1]
    plan = subprocess.run(["make", "-n", "--no-print-directory", "demo", "BLOCK=dequant_mac", "BUILD=/tmp/b"],
                          cwd=repo, capture_output=True, text=True, check=True).stdout
    runlog = next(ln for ln in plan.replace("\\\n", " ").splitlines() if "-m flow.runlog" in ln)
    args = shlex.split(runlog)
    steps = [(args[i], args[i + 1], args[i + 2].split()[2]) for i, a in enumerate(args) if a in ("--step", "--beside")]
    assert [(kind, name) for kind, name, _ in steps] == [
        ("--step", "rtl"), ("--step", "sim"), ("--step", "synth"), ("--step", "place"), ("--step", "signoff"),
        ("--step", "sta"), ("--beside", "place_sta"), ("--step", "boundaries"), ("--step", "report")]
    assert [module for *_, module in steps] == ["rtl_gen", "verification.sim", "flow.synth", "flow.place",
                                                "flow.signoff", "flow.sta", "flow.sta", "flow.boundaries",
                                                "flow.report"]
    assert "--place /tmp/b/place" in args[args.index("boundaries") + 1]
    assert "--jobs 1" in args[args.index("sta") + 1]
    assert args[args.index("place") + 1].endswith(" --no-sta --defer-outputs")
    assert "--place /tmp/b/place --jobs 1" in args[args.index("place_sta") + 1]
    assert not re.search(r"^make |\bmake -|--no-print-directory", plan, re.M)          # no sub-make
    assert "-m flow.report --build /tmp/b --out /tmp/b/report --brief --runtime /tmp/b/logs/runtime.json" in plan
