"""Slack-driven gate sizing in one OpenSTA process (OpenROAD's ``repair_timing``, sizing only, simplified).

Each pass asks OpenSTA for the worst path to each of the ``PATHS_PER_PASS`` worst violating endpoints,
walks every stage of those paths and gives a stronger drive to each driver whose load is large for its
drive (the next sizes of the same Nangate45 function: ``NAND2_X1`` -> ``NAND2_X2`` -> ``NAND2_X4``):
the size whose load per unit of drive is at most ``LOAD_PER_DRIVE_FF``, and at least one step up when
the stage takes ``MIN_STAGE_DELAY_NS`` or more. The cells are swapped with ``replace_cell`` (same pins,
so the SPEF stays valid) and the worst slack and TNS are measured again. A batch pass that makes the
worst slack worse, or improves neither it nor the TNS, is undone, and the loop goes on path by path: each stage of the worst path, slowest first, one size up,
kept only when the worst slack improves. It ends when no stage of the worst path helps, the target slack
is met, or the time budget runs out. Stronger cells are wider: the caller re-legalises the placement.
"""
from __future__ import annotations

import re
import time
from dataclasses import dataclass, field

from flow.sta_session import StaSession
from pdk_config.nangate45 import DONT_USE

PATHS_PER_PASS = 400
LOAD_PER_DRIVE_FF = 4.0         # a drive of Xn is given at most n x this much load (about four X1 inputs)
MIN_STAGE_DELAY_NS = 0.12       # a stage this slow gets at least the next size
MAX_PASSES = 200
MIN_GAIN_NS = 0.001           # a single swap on the worst path is kept when it gains this much
SIZED = re.compile(r"^([A-Z0-9]+)_X(\d+)$")
NOT_SIZED = ("FILLCELL", "TAPCELL", "ANTENNA", "LOGIC0", "LOGIC1", "CLKGATE", "CLKGATETST", "TBUF", "TINV")

# "  17.951    0.422    0.422 ^ core/mul1/_964_/Q (DFF_X1)": a driver pin with its load (fields capacitance)
_DRIVER = re.compile(r"^\s+(\d[\d.]*)\s+(-?[\d.]+)\s+(-?[\d.]+)\s+[\^v]\s+(\S+)/(\w+)\s+\((\w+)\)\s*$")
_SLACK = re.compile(r"^\s*(-?[\d.]+)\s+slack \((?:MET|VIOLATED)\)", re.M)


@dataclass(frozen=True)
class Stage:
    inst: str
    pin: str
    cell: str
    load_ff: float
    delay_ns: float


@dataclass
class ResizeResult:
    replaced: dict[str, str] = field(default_factory=dict)      # instance -> its new cell
    original: dict[str, str] = field(default_factory=dict)      # instance -> its cell before sizing
    passes: list[dict] = field(default_factory=list)
    stop: str = ""

    def merge(self, later: "ResizeResult") -> None:
        """Adds a later sizing run of the same session (its passes numbered on from these)."""
        for inst, cell in later.replaced.items():
            self.original.setdefault(inst, later.original[inst])
            self.replaced[inst] = cell
        base = self.passes[-1]["pass"] if self.passes else 0
        self.passes += [{**p, "pass": base + p["pass"]} for p in later.passes[1:]]
        self.stop = later.stop

    def as_dict(self, areas: dict[str, float]) -> dict:
        grown = sum(areas.get(self.replaced[i], 0.0) - areas.get(self.original[i], 0.0) for i in self.replaced)
        return {"cells_resized": len(self.replaced), "area_change_um2": round(grown, 3), "passes": self.passes,
                "stopped": self.stop, "paths_per_pass": PATHS_PER_PASS, "load_per_drive_ff": LOAD_PER_DRIVE_FF,
                "min_stage_delay_ns": MIN_STAGE_DELAY_NS}


def size_ladders(cells: list[str]) -> dict[str, list[int]]:
    """Function -> its drive strengths, smallest first, from the library's cell names (minus DONT_USE)."""
    out: dict[str, list[int]] = {}
    for c in cells:
        m = SIZED.match(c)
        if m and c not in DONT_USE and not m.group(1).startswith(NOT_SIZED):
            out.setdefault(m.group(1), []).append(int(m.group(2)))
    return {f: sorted(v) for f, v in out.items() if len(v) > 1}


def parse_stages(report: str) -> list[list[Stage]]:
    """Per path of a ``report_checks -fields {capacitance}`` report, its driver stages in order."""
    paths = []
    for block in re.split(r"\n(?=Startpoint:)", report):
        if "Startpoint:" not in block:
            continue
        stages = []
        for line in block.splitlines():
            m = _DRIVER.match(line)
            if m:
                stages.append(Stage(m.group(4), m.group(5), m.group(6), float(m.group(1)), float(m.group(2))))
        paths.append(stages)
    return paths


def larger_sizes(cell: str, ladders: dict[str, list[int]]) -> tuple[str, int, list[int]] | None:
    """(function, drive, the larger drives of its ladder) of ``cell``; None when it has no larger size."""
    m = SIZED.match(cell)
    if not m or m.group(1) not in ladders:
        return None
    fam, n = m.group(1), int(m.group(2))
    up = [k for k in ladders[fam] if k > n]
    return (fam, n, up) if up else None


def bigger(cell: str, load_ff: float, delay_ns: float, ladders: dict[str, list[int]]) -> str | None:
    """The size ``cell`` should become for its load and delay, or None to keep it."""
    ladder = larger_sizes(cell, ladders)
    if ladder is None:
        return None
    fam, n, up = ladder
    want = next((k for k in up if load_ff / k <= LOAD_PER_DRIVE_FF), up[-1])
    if load_ff / n <= LOAD_PER_DRIVE_FF:
        want = up[0] if delay_ns >= MIN_STAGE_DELAY_NS else n
    return None if want == n else f"{fam}_X{want}"


def _tcl_name(inst: str) -> str:
    return "{" + inst.replace("/", "\\/") + "}"


def swap(sta: StaSession, changes: dict[str, str]) -> None:
    lines = [f"replace_cell [get_cells {_tcl_name(i)}] [get_lib_cells */{c}]" for i, c in changes.items()]
    for k in range(0, len(lines), 2000):
        sta.run("\n".join(lines[k:k + 2000]))


def measure(sta: StaSession) -> tuple[float, float]:
    """(worst setup slack, TNS) in ns."""
    return (sta.value("[sta::worst_slack_cmd max]") * 1e9, sta.value("[sta::total_negative_slack_cmd max]") * 1e9)


def _batch_pass(sta: StaSession, ladders, target_ns: float, wns: float, tns: float, res: "ResizeResult"):
    """One pass over the worst paths' stages, all changes at once. Returns the new (wns, tns, count), or
    None when nothing could be sized or the pass did not help (it is then undone)."""
    report = sta.run(f"report_checks -path_delay max -group_count {PATHS_PER_PASS} -endpoint_count 1 "
                     f"-slack_max {target_ns} -fields {{capacitance}} -digits 4")
    changes: dict[str, str] = {}
    now: dict[str, str] = {}                                          # the cells the report shows
    for stages in parse_stages(report):
        for st in stages:
            new = None if st.inst in changes else bigger(st.cell, st.load_ff, st.delay_ns, ladders)
            if new:
                changes[st.inst], now[st.inst] = new, st.cell
    if not changes:
        return None
    swap(sta, changes)
    new_wns, new_tns = measure(sta)
    if new_wns < wns - MIN_GAIN_NS or (new_wns <= wns and new_tns <= tns):
        swap(sta, now)
        return None
    for i, c in changes.items():
        res.original.setdefault(i, now[i])
        res.replaced[i] = c
    return new_wns, new_tns, len(changes)


def _path_pass(sta: StaSession, ladders, wns: float, res: "ResizeResult"):
    """The worst path alone: each of its stages, slowest first, one size up, kept only if the worst slack
    improves by ``MIN_GAIN_NS``. Returns (wns, tns, kept) or None when no stage helped."""
    report = sta.run("report_checks -path_delay max -group_count 1 -endpoint_count 1 -fields {capacitance} -digits 4")
    paths = parse_stages(report)
    kept, tns = 0, None
    for st in sorted(paths[0] if paths else [], key=lambda st: -st.delay_ns):
        m = SIZED.match(st.cell)
        up = [n for n in ladders.get(m.group(1), []) if n > int(m.group(2))] if m else []
        if not up:
            continue
        swap(sta, {st.inst: f"{m.group(1)}_X{up[0]}"})
        new_wns, new_tns = measure(sta)
        if new_wns > wns + MIN_GAIN_NS:
            res.original.setdefault(st.inst, st.cell)
            res.replaced[st.inst] = f"{m.group(1)}_X{up[0]}"
            wns, tns, kept = new_wns, new_tns, kept + 1
        else:
            swap(sta, {st.inst: st.cell})
    return (wns, tns, kept) if kept else None


def resize(sta: StaSession, ladders: dict[str, list[int]], target_ns: float, budget_s: float,
           progress=lambda msg: None) -> ResizeResult:
    """Sizes cells on the violating paths of the design loaded in ``sta`` until the worst slack reaches
    ``target_ns`` (see the module's docstring): batch passes while they help, then path by path."""
    res = ResizeResult()
    t0 = time.monotonic()
    wns, tns = measure(sta)
    res.passes.append({"pass": 0, "mode": "start", "wns_ns": round(wns, 4), "tns_ns": round(tns, 3), "resized": 0})
    mode = "batch"
    for k in range(1, MAX_PASSES + 1):
        if wns >= target_ns:
            res.stop = f"worst slack {wns:.3f} ns meets the target {target_ns} ns"
            break
        if time.monotonic() - t0 > budget_s:
            res.stop = f"time budget of {budget_s:.0f} s used"
            break
        step = _batch_pass(sta, ladders, target_ns, wns, tns, res) if mode == "batch" else _path_pass(sta, ladders, wns, res)
        if step is None and mode == "batch":
            mode = "path"
            continue
        if step is None:
            res.stop = "no single size step on the worst path improves it"
            break
        wns, tns_new, count = step
        tns = tns if tns_new is None else tns_new
        res.passes.append({"pass": k, "mode": mode, "wns_ns": round(wns, 4), "tns_ns": round(tns, 3),
                           "resized": count, "s": round(time.monotonic() - t0, 1)})
        progress(f"sizing pass {k} ({mode}): {count:,} cells up-sized, worst slack {wns:+.3f} ns, TNS {tns:,.1f} ns "
                 f"({time.monotonic() - t0:.0f} s)")
    else:
        res.stop = f"{MAX_PASSES} passes"
    return res
