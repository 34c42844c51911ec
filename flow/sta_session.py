"""One long-running OpenSTA process that takes Tcl commands and answers each in turn.

Timing repair asks STA thousands of small questions (the worst paths, a cell swapped, the slack again);
reading a 2M-cell netlist and its SPEF takes minutes, so it is read once and the process is kept.
OpenSTA's interactive prompt edits and runs its input line by line, so the process runs ``DRIVER``
instead: it collects lines until ``@@RUN <n>``, evaluates them as one script under ``catch`` and ends
the answer with ``@@END<n>``, so the caller knows where each answer ends and whether Tcl raised an
error. Everything the process prints goes to a log as well.
"""
from __future__ import annotations

import itertools
import subprocess
from pathlib import Path

from flow.toolchain import require


DRIVER = """\
fconfigure stdout -buffering line
set buf ""
while {[gets stdin line] >= 0} {
  if {[string match "@@RUN *" $line]} {
    if {[catch {uplevel #0 $buf} err]} { puts "@@TCLERROR [string map {"\n" " "} $err]" }
    puts "@@END[string range $line 6 end]"
    flush stdout
    set buf ""
  } else {
    append buf $line "\n"
  }
}
"""


class StaSessionError(RuntimeError):
    """OpenSTA failed a command or stopped; the message holds its last words and the log's path."""


class StaSession:
    def __init__(self, log: Path):
        require("sta")
        self.log_path = Path(log)
        self._log = open(self.log_path, "w")
        self._ids = itertools.count()
        self._pending: list[tuple[int, str]] = []
        driver = self.log_path.with_name(self.log_path.stem + "_driver.tcl")
        driver.write_text(DRIVER)
        self._proc = subprocess.Popen(["sta", "-no_init", "-no_splash", "-exit", str(driver)], stdin=subprocess.PIPE,
                                      stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1)

    def submit(self, tcl: str) -> None:
        """Sends ``tcl`` and returns at once: OpenSTA works on it meanwhile (a netlist read and its first
        timing update while another session sizes). The next ``run`` or ``drain`` waits for its answer
        first, and raises if it failed."""
        n = next(self._ids)
        self._log.write(f"### {tcl}\n")
        self._proc.stdin.write(f"{tcl}\n@@RUN {n}\n")
        self._proc.stdin.flush()
        self._pending.append((n, tcl))

    def drain(self) -> None:
        """Waits for every ``submit``-ted command's answer (their output goes to the log only)."""
        while self._pending:
            self._collect(*self._pending.pop(0))

    def _collect(self, n: int, tcl: str) -> str:
        end = f"@@END{n}"
        lines = []
        for line in self._proc.stdout:
            line = line.rstrip("\n")
            if line.strip() == end:
                break
            lines.append(line)
        else:
            self._log.write("\n".join(lines) + "\n")
            self._log.flush()
            raise StaSessionError(f"OpenSTA stopped (exit {self._proc.wait()}) while running: {tcl[:200]}\n"
                                  + "\n".join(lines[-10:]) + f"\nlog: {self.log_path}")
        text = "\n".join(lines)
        self._log.write(text + "\n")
        self._log.flush()
        bad = [ln for ln in lines if ln.startswith(("@@TCLERROR", "Error"))]
        if bad:
            raise StaSessionError(f"OpenSTA: {bad[0]} (command: {tcl[:200]}); log: {self.log_path}")
        return text

    def run(self, tcl: str) -> str:
        """The output of ``tcl`` (without OpenSTA's prompts); raises on a Tcl error or an ``Error:`` line."""
        self.drain()
        self.submit(tcl)
        return self._collect(*self._pending.pop())

    def value(self, expr: str) -> float:
        """A Tcl expression's numeric value, e.g. ``[sta::worst_slack_cmd max]``."""
        out = self.run(f'puts "@@V {expr}"')
        for line in out.splitlines():
            if line.startswith("@@V "):
                return float(line[4:])
        raise StaSessionError(f"OpenSTA gave no value for {expr}: {out[-300:]}")

    def close(self) -> None:
        if self._proc.poll() is None:
            try:
                self._proc.stdin.close()
                self._proc.wait(timeout=60)
            except (BrokenPipeError, subprocess.TimeoutExpired):
                self._proc.kill()
        self._log.close()

    def __enter__(self) -> "StaSession":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
