"""Run flow steps one after another (or two side by side), each one's output in its own log file, the
terminal showing one status line at a time: every running step's name, elapsed time and latest progress.

    python -m flow.runlog --logs build/logs --step synth "CMD" --step sta "CMD" --beside place "CMD" ...

``make demo`` runs its steps through this. ``--step`` starts after every earlier step ended; ``--beside``
runs beside the step before it. A step's stdout and stderr go, line by line, to ``<logs>/<name>.log``; its
lines on stdout that are not progress (the stage's summary: progress lines are on stderr or start with a
``[tag]``) are printed once when it ends. The status shows ``k/n`` and a bar when the latest progress line
counts (``region x ... (3 of 13 regions)``), else a bar and ``~NN %`` from the same step's duration in the
previous run (same command, ``runtime.json``), else the elapsed time alone.
On a terminal the status line is rewritten in place; into a file or pipe it is printed every ``--every``
seconds while it changes and at least once a minute. A failed step prints its ``<stage>: error: ...`` lines
and its log's last lines; the steps after it do not start (one beside it finishes). ``<logs>/runtime.json`` records every step's wall
time, its log and the total (``flow.report --brief --runtime`` prints it).
"""
from __future__ import annotations

import argparse
import json
import os
import queue
import re
import shlex
import shutil
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

SCHEMA = "nano-k3/runtime/1"
PROGRESS_TAG = re.compile(r"^\s*\[[^\]]+\]")        # "[synth] ...", "  [sim] ...": progress on stdout
STAGE_ERROR = re.compile(r"^[\w.]+: error: ")      # how a flow stage says why it stopped (flow/cli.py)
COUNT = re.compile(r"\b(\d[\d,]*) of (\d[\d,]*)\b")  # "3 of 13 regions"
TAIL_LINES = 20            # of a failed step's log
SUMMARY_LINES = 40         # of a step's summary on the terminal; all of it is in its log
HEARTBEAT_S = 60.0         # a step's status is printed at least this often into a file
BAR = 10


@dataclass
class Step:
    name: str
    argv: list[str]
    group: int                     # steps of one group run side by side
    log: Path
    previous_s: float | None = None  # the same step's duration in the previous run, for an estimate
    start: float | None = None
    end: float | None = None
    returncode: int | None = None
    latest: str = ""
    count: tuple[int, int] | None = None
    results: list[str] = field(default_factory=list)

    def take(self, line: str, stdout: bool) -> None:
        """One line of the step's output: the latest progress, a count in it, and its summary lines."""
        text = line.strip()
        if not text:
            return
        self.latest = PROGRESS_TAG.sub("", text).strip() or text
        m = COUNT.search(text)
        k, n = (int(g.replace(",", "")) for g in m.groups()) if m else (0, 0)
        self.count = (k, n) if 0 <= k <= n > 0 else None       # of this line only: a new phase drops it
        if stdout and not PROGRESS_TAG.match(line):
            self.results.append(line.rstrip())


def elapsed(seconds: float) -> str:
    """``m:ss``, or ``h:mm:ss`` from an hour on."""
    s = int(seconds)
    return f"{s // 3600}:{s // 60 % 60:02d}:{s % 60:02d}" if s >= 3600 else f"{s // 60}:{s % 60:02d}"


def _bar(fraction: float) -> str:
    n = min(BAR, max(0, round(fraction * BAR)))
    return "[" + "#" * n + "-" * (BAR - n) + "]"


def step_status(step: Step, now: float) -> str:
    """``place 12:34 [####------] 4/13 region core/mac: ...`` (a count), ``~40 %`` (from the previous run)."""
    t = now - step.start
    head = f"{step.name} {elapsed(t)}"
    if step.count:
        k, n = step.count
        head += f" {_bar(k / n)} {k}/{n}"
    elif step.previous_s:
        fraction = min(t / step.previous_s, 0.99)
        head += f" {_bar(fraction)} ~{100 * fraction:.0f} %"
    return f"{head} {step.latest}" if step.latest else head


def combined_status(steps: list[Step], now: float, width: int) -> str:
    """The running steps' statuses in one line of at most ``width`` characters, each given an equal share."""
    running = [s for s in steps if s.start is not None and s.end is None]
    if not running:
        return ""
    share = max(20, (width - 3 * (len(running) - 1)) // len(running))
    parts = [_clip(step_status(s, now), share) for s in running]
    return _clip(" | ".join(parts), width)


def _clip(text: str, width: int) -> str:
    return text if len(text) <= width else text[:max(0, width - 3)] + "..."


class Terminal:
    """Permanent lines and the status line. On a terminal the status is redrawn in place below the last
    permanent line; elsewhere a status is printed as a line of its own, ``  .. <status>``, when it changed
    (``every`` seconds after the last line at the soonest) or at least once a minute."""

    def __init__(self, out: TextIO, tty: bool, every: float):
        self.out, self.tty, self.every = out, tty, every
        self.shown, self.printed, self.printed_at = "", "", float("-inf")

    def width(self) -> int:
        return shutil.get_terminal_size((120, 24)).columns - 1 if self.tty else 160

    def line(self, text: str) -> None:
        """A permanent line; into a file the next status waits ``every`` seconds after it."""
        if self.tty and self.shown:
            self.out.write("\r\x1b[K")
        self.out.write(text + "\n")
        if self.tty and self.shown:
            self.out.write(self.shown)
        self.out.flush()
        self.printed_at = time.monotonic()

    def status(self, text: str, now: float) -> None:
        if self.tty:
            if text != self.shown:
                self.out.write("\r\x1b[K" + text)
                self.out.flush()
                self.shown = text
            return
        changed = _without_clock(text) != _without_clock(self.printed)
        if text and ((changed and now - self.printed_at >= self.every) or now - self.printed_at >= HEARTBEAT_S):
            self.out.write(f"  .. {text}\n")
            self.out.flush()
            self.printed, self.printed_at = text, now

    def clear(self) -> None:
        if self.tty and self.shown:
            self.out.write("\r\x1b[K")
            self.out.flush()
            self.shown = ""


def _without_clock(text: str) -> str:
    return re.sub(r"\b\d+:\d\d(:\d\d)?\b|~\d+ %|\[[#-]+\]", "", text)


def _pump(stream, step: Step, stdout: bool, q: queue.Queue) -> None:
    for line in stream:
        q.put((step, line, stdout))
    q.put((step, None, stdout))


def _start(step: Step, q: queue.Queue, term: Terminal) -> tuple[subprocess.Popen, TextIO]:
    step.log.parent.mkdir(parents=True, exist_ok=True)
    log = open(step.log, "w")
    log.write(f"$ {shlex.join(step.argv)}\n")
    log.flush()
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    try:
        proc = subprocess.Popen(step.argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
                                text=True, errors="replace", env=env)
    except OSError as e:
        log.close()
        raise SystemExit(f"runlog: cannot start step {step.name}: {shlex.join(step.argv)}: {e}") from None
    step.start = time.monotonic()
    term.line(f"{step.name}: {' '.join(shlex.join(step.argv).split())} (log {step.log})")     # on one line
    for stream, is_out in ((proc.stdout, True), (proc.stderr, False)):
        threading.Thread(target=_pump, args=(stream, step, is_out, q), daemon=True).start()
    return proc, log


def _finish(step: Step, term: Terminal) -> None:
    took = elapsed(step.end - step.start)
    if step.returncode == 0:
        term.line(f"{step.name}: done in {took} (log {step.log})")
        for r in step.results[:SUMMARY_LINES]:
            term.line(f"  {r}")
        if len(step.results) > SUMMARY_LINES:
            term.line(f"  ... {len(step.results) - SUMMARY_LINES} more lines in {step.log}")
        return
    lines = step.log.read_text(errors="replace").splitlines()
    term.line(f"{step.name}: FAILED (exit status {step.returncode}) after {took}")
    for r in [ln for ln in lines if STAGE_ERROR.match(ln)][:3]:     # above a tail of the tool's own complaints
        term.line(f"  {r}")
    term.line(f"  the last lines of {step.log}:")
    for r in lines[-TAIL_LINES:]:
        term.line(f"  | {r}")


def run_group(group: list[Step], term: Terminal, tick: float = 0.5) -> None:
    """Every step of ``group`` side by side until all have ended; their output into their logs."""
    q: queue.Queue = queue.Queue()
    procs: dict[str, tuple[subprocess.Popen, TextIO]] = {}
    open_streams = {step.name: 2 for step in group}
    try:
        for step in group:
            procs[step.name] = _start(step, q, term)
        while any(s.end is None for s in group):
            try:
                step, line, stdout = q.get(timeout=tick)
            except queue.Empty:
                step = None
            if step is not None:
                proc, log = procs[step.name]
                if line is None:
                    open_streams[step.name] -= 1
                    if open_streams[step.name] == 0:
                        step.returncode, step.end = proc.wait(), time.monotonic()
                        log.write(f"# exit status {step.returncode} after {step.end - step.start:.1f} s\n")
                        log.close()
                        term.clear()
                        _finish(step, term)
                else:
                    log.write(line)
                    log.flush()
                    step.take(line, stdout)
            now = time.monotonic()
            term.status(combined_status(group, now, term.width()), now)
    finally:
        for step in group:
            if step.name in procs and step.end is None:
                procs[step.name][0].terminate()
                procs[step.name][0].wait()
                procs[step.name][1].close()
        term.clear()


def previous_seconds(path: Path) -> dict[tuple[str, str], float]:
    """(step, command) -> seconds of the steps that passed in the run recorded at ``path`` (none: {})."""
    try:
        record = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return {(s["name"], s["command"]): s["seconds"] for s in record.get("steps", [])
            if s.get("status") == "ok" and isinstance(s.get("seconds"), (int, float))}


def record(steps: list[Step], wall_s: float) -> dict:
    """What ``runtime.json`` holds: each step's wall time, status and log; the whole run's wall time."""
    def status(s: Step) -> str:
        return "not run" if s.start is None else "stopped" if s.end is None else \
            "ok" if s.returncode == 0 else "failed"
    return {"schema": SCHEMA, "wall_s": round(wall_s, 1), "finished_unix": round(time.time(), 1),
            "steps": [{"name": s.name, "command": shlex.join(s.argv), "group": s.group, "status": status(s),
                       "seconds": round(s.end - s.start, 1) if s.start is not None and s.end is not None else None,
                       "log": str(s.log)} for s in steps]}


def runtime_text(rec: dict) -> str:
    """One line: each step's wall time (side by side steps joined by ``beside``) and the total."""
    groups: dict[int, list[str]] = {}
    for s in rec["steps"]:
        took = s["status"] if s["seconds"] is None else elapsed(s["seconds"]) + \
            ("" if s["status"] == "ok" else f" ({s['status']})")
        groups.setdefault(s["group"], []).append(f"{s['name']} {took}")
    return ", ".join(" beside ".join(g) for g in groups.values()) + f"; total {elapsed(rec['wall_s'])} wall clock"


def run(steps: list[Step], logs: Path, term: Terminal) -> int:
    """The steps group by group; a failed group stops the run. Writes ``<logs>/runtime.json`` and, when the run
    did not pass, prints it (the closing summary of a run that passed does); the exit status."""
    t0 = time.monotonic()
    groups: dict[int, list[Step]] = {}
    for s in steps:
        groups.setdefault(s.group, []).append(s)
    passed = False
    try:
        for group in groups.values():
            if len(group) > 1:
                term.line(f"{' and '.join(s.name for s in group)} side by side; the status line shows both, "
                          f"each writes its own log")
            run_group(group, term)
            if any(s.returncode for s in group):
                return 1
        passed = True
        return 0
    finally:
        rec = record(steps, time.monotonic() - t0)
        logs.mkdir(parents=True, exist_ok=True)
        tmp = logs / "runtime.json.tmp"
        tmp.write_text(json.dumps(rec, indent=1) + "\n")
        tmp.rename(logs / "runtime.json")
        if not passed:
            term.line(f"runtime: {runtime_text(rec)} ({logs / 'runtime.json'})")


class _StepAction(argparse.Action):
    """--step / --beside NAME CMD, kept in order in one list."""

    def __call__(self, parser, namespace, values, option_string=None):
        steps = getattr(namespace, "steps", None) or []
        if option_string == "--beside" and not steps:
            parser.error("--beside needs a --step before it")
        group = steps[-1][0] + (option_string == "--step") if steps else 0
        steps.append((group, values[0], values[1]))
        namespace.steps = steps


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m flow.runlog", description=__doc__.split("\n\n")[0])
    ap.add_argument("--logs", type=Path, required=True, help="folder of the steps' logs and runtime.json")
    ap.add_argument("--step", nargs=2, metavar=("NAME", "CMD"), action=_StepAction, dest="steps",
                    help="a step that starts when every earlier one has ended")
    ap.add_argument("--beside", nargs=2, metavar=("NAME", "CMD"), action=_StepAction, dest="steps",
                    help="a step that runs beside the one before it")
    ap.add_argument("--every", type=float, default=10.0,
                    help="seconds between status lines when the output is not a terminal (default 10)")
    args = ap.parse_args(argv)
    if not args.steps:
        ap.error("no --step given")
    names = [name for _, name, _ in args.steps]
    if len(set(names)) != len(names):
        ap.error(f"step names must differ (each names its log): {', '.join(names)}")
    before = previous_seconds(args.logs / "runtime.json")
    steps = []
    for group, name, cmd in args.steps:
        argv_ = shlex.split(cmd)
        if not argv_:
            ap.error(f"step {name}: empty command")
        steps.append(Step(name, argv_, group, args.logs / f"{name}.log", before.get((name, shlex.join(argv_)))))
    term = Terminal(sys.stdout, sys.stdout.isatty(), args.every)
    try:
        return run(steps, args.logs, term)
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
