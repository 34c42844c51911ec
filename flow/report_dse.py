"""The report's design-space section: the sweep's front table and Pareto plot (flow/dse), when it ran."""
from __future__ import annotations

import shutil
from pathlib import Path

DSE_COMMAND = "make dse"          # python -m flow.dse --out <build>/dse (Makefile)
PLOT = "dse_pareto.png"


def md_dse(build: Path, out: Path) -> list[str]:
    """The section's lines; the plot is copied into ``out`` (a stale copy is deleted when the sweep's is gone)."""
    front, plot = build / "dse" / "front.md", build / "dse" / "pareto.png"
    md = ["## Design space (tokens/s against priced area)", ""]
    if not front.is_file():
        (out / PLOT).unlink(missing_ok=True)
        return md + [f"not run: `{DSE_COMMAND}` (python -m flow.dse)", ""]
    if plot.is_file():
        shutil.copyfile(plot, out / PLOT)
        md += [f"![Pareto front of the sweep]({PLOT})", ""]
    else:
        (out / PLOT).unlink(missing_ok=True)
    # the sweep's own table, its headings one level down
    md += ["#" + ln if ln.startswith("#") else ln for ln in front.read_text().splitlines()]
    return md + [""]
