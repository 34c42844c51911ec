"""`make readme`: the README's results table, generated from the build's JSON so it cannot go stale.

    python -m flow.readme_results [--build build] [--readme README.md] [--print]

Reads what the report reads (``flow.report.load``: simulation summary, benchmark, synthesis, STA, placement
and its post-placement STA, the blocks table) plus sign-off (``signoff/signoff.json``) and ``make demo``'s
step times (``logs/runtime.json``), and rewrites the lines between ``BEGIN`` and ``END`` in the README.
Every number in that block comes from one of those files. A result that is missing or unreadable says so,
with the command that makes it; one that was made from another RTL than ``build/rtl/config.json`` (a
different config hash, or for the files that carry none, older than it) is marked stale, with the command
that refreshes it. ``--print`` prints the block and writes nothing.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import sys
from pathlib import Path

from flow.report import CHAIN, FLOW_MINUTES_GOAL, flow_seconds, load
from flow.report_signoff import priced_mm2
from flow.report_summary import K3_TOKENS_PER_S, fmt, placed_corners, placed_text, summary
from flow.runlog import runtime_text

BEGIN = "<!-- results: written by `make readme` from the build's JSON; edits here are overwritten -->"
END = "<!-- end of results -->"

# stage -> the make target that (re)makes its file; a block other than the chip gets BLOCK=<block>
MAKE = {"sim": "make sim", "bench": "make bench", "synth": "make synth", "sta": "make sta", "place": "make place",
        "place_sta": "make place", "signoff": "make signoff", "runtime": "make demo", "blocks": "make blocks",
        "chip_power": "make chip-power"}
# stage -> where its file records the hash of the RTL's config.json it was made from (None: judged by age)
RTL_HASH = {"synth": ("rtl", "config_sha256"), "sta": ("synth_config_sha256",), "place": ("synth_config_sha256",),
            "place_sta": ("synth_config_sha256",), "signoff": ("synth_config_sha256",), "sim": None, "bench": None,
            "chip_power": ("synth_config_sha256",)}
EXTRA = {"signoff": ("signoff/signoff.json", ("top", "corners", "signed_off")),
         "runtime": ("logs/runtime.json", ("steps", "wall_s"))}


class ReadmeError(Exception):
    pass


# ---------------------------------------------------------------------------------------------- reading
def _load_extra(build: Path, stage: str) -> dict:
    """The stages flow.report does not read, in its entry format (status "ok" | "not run" | "unreadable")."""
    rel, keys = EXTRA[stage]
    path = build / rel
    entry = {"path": str(path), "command": MAKE[stage], "status": "not run", "data": None}
    if not path.is_file():
        return entry
    try:
        data = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        return {**entry, "status": "unreadable", "error": str(e)}
    missing = [k for k in keys if k not in data] if isinstance(data, dict) else ["a JSON object"]
    if missing:
        return {**entry, "status": "unreadable", "error": f"no {', '.join(missing)} in it"}
    return {**entry, "status": "ok", "data": data}


def _dig(data: dict, keys: tuple) -> object:
    for k in keys:
        data = data.get(k) if isinstance(data, dict) else None
    return data


def rtl_of(build: Path) -> dict | None:
    """The build's RTL: its config.json's block, top, hash and time, or None when there is none."""
    path = build / "rtl" / "config.json"
    if not path.is_file():
        return None
    raw = path.read_bytes()
    try:
        cfg = json.loads(raw)
    except json.JSONDecodeError as e:
        raise ReadmeError(f"{path} is not JSON ({e}); `make rtl` writes it again") from None
    return {"path": path, "sha256": hashlib.sha256(raw).hexdigest(), "mtime": path.stat().st_mtime,
            "block": cfg.get("block"), "top": cfg.get("top"), "preset": (cfg.get("params") or {}).get("name")}


def stale_reason(stage: str, entry: dict, rtl: dict | None) -> str | None:
    """Why a result does not describe the build's RTL, or None when it does (or cannot be judged)."""
    if entry["data"] is None or rtl is None or stage not in RTL_HASH:
        return None
    keys = RTL_HASH[stage]
    if keys is not None:
        h = _dig(entry["data"], keys)
        if h is not None and h != rtl["sha256"]:
            return f"made from another RTL (config sha256 {str(h)[:12]}, build/rtl has {rtl['sha256'][:12]})"
        if h is not None:
            return None
    if Path(entry["path"]).stat().st_mtime < rtl["mtime"]:
        return "older than build/rtl/config.json"
    return None


def read_build(build: Path) -> dict:
    """Every stage entry (flow.report.load's and sign-off's, runtime's), each with ``stale`` (None or why)."""
    stages = load(build)
    stages.update({s: _load_extra(build, s) for s in EXTRA})
    rtl = rtl_of(build)
    suffix = f" BLOCK={rtl['block']}" if rtl and rtl["block"] not in (None, "chip") else ""
    for stage, e in stages.items():
        e["stale"] = stale_reason(stage, e, rtl)
        e["make"] = MAKE.get(stage, e["command"]) + (suffix if stage not in ("bench", "blocks", "runtime") else "")
    return {"stages": stages, "rtl": rtl, "build": build}


# ---------------------------------------------------------------------------------------------- rendering
def _shown(build: Path, path: str) -> str:
    """A stage file as the README names it: under the build folder's own name (``build/sim/summary.json``)."""
    return f"{build.name}/{Path(path).relative_to(build).as_posix()}"


def _cell(b: dict, stage: str, text: str | None) -> str:
    """``text`` for a current result; the stage's state and command when missing, unreadable or stale."""
    e = b["stages"][stage]
    if e["status"] == "not run":
        return f"not run: `{e['make']}` writes it"
    if e["status"] == "unreadable":
        return f"unreadable ({e.get('error')}): `{e['make']}` writes it again"
    if e["stale"]:
        return f"**stale**, {e['stale']} (`{e['make']}` refreshes it): {text}"
    return text


def _corners(corners: dict, key: str = "wns_ns") -> str:
    return " / ".join(f"{c} {v[key]:+.3f}" for c, v in corners.items() if v and v.get(key) is not None) + " ns"


def _correctness(s: dict) -> str | None:
    c = s["correctness"]
    if c["level"] == "chip":
        return (f"**{c['verdict']}** (`{c['top']}`): bit-exact with the fixed-point model in {c['bit_exact_runs']} "
                f"runs, min cosine with the float model {fmt(c['min_cosine'], '.6f')}, argmax agreement "
                f"{fmt(c['argmax_agreement'], '.4f')}, elasticity {fmt(c['elasticity'], '.3f')}")
    if c["level"] == "block":
        return f"**{c['verdict']}** (`{c['top']}`): {c['tests'] - (c['failed'] or 0)}/{c['tests']} tests"
    return None


def _speed(s: dict, stages: dict) -> tuple[str, str | None]:
    sp = s["speed"]
    if not sp["measured"]:
        return "bench", None
    text = (f"**{sp['tokens_per_s']:,.0f} tokens/s** at 100 MHz = {fmt(sp['cycles_per_token'], ',.1f')} cycles/token "
            f"on the {sp['run']} run ({sp['vs_k3']:.2f}× K3's chip, {K3_TOKENS_PER_S:,})")
    bench = stages["bench"]["data"]
    if sp["source"] == "bench" and bench:
        run = next((r for r in bench.get("runs", []) if r.get("name") == sp["run"]), None)
        err = ((run or {}).get("model") or {}).get("error")
        if err is not None:
            text += f"; perf/model.py predicts it within {100 * err:+.2f} %"
    return sp["source"], text


def _area(s: dict) -> str | None:
    z = s["size"]
    if z["total_mm2"] is None:
        return None
    return (f"**{z['total_mm2']:.3f} mm²** = {z['logic_mm2']:.3f} logic ({z['cells']:,} cells, Nangate45 typical) + "
            f"{z['macro_mm2']:.3f} macros ({z['macro_bits']:,} bits at 1 mm²/Mibit): {100 * z['budget_used']:.1f} % of "
            f"{z['budget_mm2']:g} mm²")


def _pre_timing(stages: dict) -> str | None:
    sta = stages["sta"]["data"]
    if sta is None:
        return None
    worst = max((v["min_period_ns"] for v in sta["corners"].values() if v.get("min_period_ns") is not None),
                default=None)
    return (f"worst slack {_corners(sta['corners'])} at {sta['period_ns']:g} ns (wire-load model); shortest period "
            f"{fmt(worst, '.2f')} ns")


def _placement(s: dict, stages: dict) -> str | None:
    p = s["placement"]
    if p is None:
        return None
    placed = placed_corners(stages)
    slack = _corners(placed) if placed else "not timed: python -m flow.sta --place writes it"
    return (f"die {fmt(p['die_mm2'], '.2f')} mm², {fmt(100 * p['utilization'] if p['utilization'] else None, '.1f')} % "
            f"row utilization, {fmt(p['cells_placed'], ',')} cells and {fmt(p['macros_placed'], ',')} fakeram45 macros, "
            f"HPWL {fmt(p['hpwl_um'] / 1e6 if p['hpwl_um'] else None, '.1f')} m; worst slack with placed-wire "
            f"parasitics {slack}")


def _signoff(stages: dict) -> str | None:
    r = stages["signoff"]["data"]
    if r is None:
        return None
    corners = r["corners"]
    slew = sum(v.get("max_transition_violations") or 0 for v in corners.values())
    dr = r.get("design_rules") or {}
    clock = r.get("clock") or {}
    fast = corners.get("fast", {}).get("worst_hold_slack_ns")
    verdict = "**signed off**" if r["signed_off"] else "**not signed off**"
    return (f"{verdict}: setup {_corners(corners)}, hold at fast {fmt(fast, '+.3f')} ns; clock "
            f"{clock.get('model', 'model not recorded')} with {fmt(clock.get('setup_uncertainty_ns'), 'g')} ns setup "
            f"uncertainty, placed wires, not routed; "
            f"{slew:,} max-transition, {fmt(dr.get('max_capacitance_violations'), ',')} max-capacitance, "
            f"{fmt(dr.get('max_fanout_violations'), ',')} max-fanout violations; "
            f"cell area {fmt(r.get('std_cell_area_um2') and r['std_cell_area_um2'] / 1e6, '.3f')} mm², priced with "
            f"the macros {fmt(priced_mm2(r, stages['synth']['data']), '.3f')} mm²")


def _power(s: dict, stages: dict) -> str | None:
    """The chip's measured power and, at the speed row's tokens/s, its energy per token."""
    pw, tps = stages["chip_power"]["data"], s["speed"]["tokens_per_s"]
    if pw is None:
        return None
    w = pw["total_mW"] * 1e-3
    energy = f": **{w / tps * 1e6:.3f} µJ/token**, {tps / w:,.0f} tokens/s/W at {tps:,.0f} tokens/s" if tps else ""
    return (f"{pw['total_mW']:.1f} mW at the typical corner, from the netlist's switching activity in its gate-level "
            f"short run (logic {sum(pw['logic'].values()):.1f} mW, {pw['macros']['tiles']} fakeram45 tiles "
            f"{pw['macros']['leakage_mW'] + pw['macros']['clock_mW'] + pw['macros']['pins_mW']:.1f} mW){energy}")


def _blocks(build: Path, stages: dict) -> str | None:
    b = stages["blocks"]["data"]
    if b is None:
        return None
    rows = b["blocks"]
    passed = sum(r.get("tests", {}).get("status") == "pass" for r in rows)
    failed = [r["block"] for r in rows if "error" in r or r.get("tests", {}).get("status") == "FAIL"]
    return (f"{len(rows)} blocks synthesized and timed one by one, {passed} with passing tests"
            + (f", failed: {', '.join(failed)}" if failed else "")
            + f" (`{b.get('command', 'make blocks')}`; the table: `{_shown(build, str(Path(stages['blocks']['path']).with_suffix('.md')))}`)")


def _chain(stages: dict) -> str | None:
    """Synthesis through sign-off: the wall clock of the three steps (their own ``runtime_s``, as the report's
    Flow runtime adds them up) against the 30-minute goal."""
    data = [stages[k]["data"] for k in CHAIN]
    if any(d is None or d.get("runtime_s") is None for d in data):
        return None
    total = flow_seconds(data)
    return (f"{total:,.0f} s ({total / 60:.1f} min), {'within' if total <= FLOW_MINUTES_GOAL * 60 else 'over'} the "
            f"{FLOW_MINUTES_GOAL}-minute goal: " + ", ".join(f"{k} {d['runtime_s']:,.0f} s" for k, d in zip(CHAIN, data)))


def render(build: Path) -> str:
    """The Markdown block between BEGIN and END (without them)."""
    b = read_build(build)
    stages, rtl = b["stages"], b["rtl"]
    s = summary(stages)
    src, speed = _speed(s, stages)
    runtime = stages["runtime"]["data"]
    rows = [
        ("correctness", "sim", _correctness(s)),
        ("speed", src, speed),
        ("speed at the placed clock", "signoff" if str(s["speed"]["placed"].get("path", "")).endswith("signoff.json")
         else "place", placed_text(s["speed"]["placed"])),
        ("area (synthesis)", "synth", _area(s)),
        ("timing before placement", "sta", _pre_timing(stages)),
        ("placement", "place", _placement(s, stages)),
        ("sign-off", "signoff", _signoff(stages)),
        ("synthesis through sign-off", "signoff", _chain(stages)),
        ("power, energy per token", "chip_power", _power(s, stages)),
        ("engines one by one", "blocks", _blocks(build, stages)),
        ("`make demo` step times", "runtime", runtime and runtime_text(runtime)),
    ]
    if rtl is None:
        head = f"No RTL in `{build.name}/rtl` (`make rtl` emits it): results below cannot be matched to a design."
    else:
        head = (f"From `{build.name}/` of `{rtl['top']}` (block {rtl['block']}, preset {rtl['preset']}, "
                f"config.json sha256 {rtl['sha256'][:12]}).")
    lines = [head, "", "| result | value | file |", "|---|---|---|"]
    for name, stage, text in rows:
        e = stages[stage]
        if e["status"] == "ok" and text is None:
            text = "not measured in this file"
        lines.append(f"| {name} | {_cell(b, stage, text)} | `{_shown(build, e['path'])}` |")
    lines += [f"\n**Warning:** {w}." for w in s["warnings"]]
    return "\n".join(lines)


def rewrite(readme_text: str, block: str) -> str:
    """``readme_text`` with the lines between its BEGIN and END markers replaced by ``block``."""
    if readme_text.count(BEGIN) != 1 or readme_text.count(END) != 1 or readme_text.index(BEGIN) > readme_text.index(END):
        raise ReadmeError(f"the README needs the marker lines once each, in order:\n  {BEGIN}\n  {END}")
    before, rest = readme_text.split(BEGIN, 1)
    _, after = rest.split(END, 1)
    return f"{before}{BEGIN}\n{block}\n{END}{after}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m flow.readme_results", description=__doc__.split("\n\n")[0])
    ap.add_argument("--build", type=Path, default=Path("build"))
    ap.add_argument("--readme", type=Path, default=Path("README.md"))
    ap.add_argument("--print", action="store_true", help="print the block, write nothing")
    args = ap.parse_args(argv)
    try:
        block = render(args.build)
        if args.print:
            print(block)
            return 0
        text = rewrite(args.readme.read_text(), block)
    except (ReadmeError, OSError) as e:
        print(f"flow.readme_results: error: {e}", file=sys.stderr)
        return 1
    tmp = args.readme.with_name(args.readme.name + ".tmp")
    tmp.write_text(text)
    tmp.replace(args.readme)
    print(f"wrote the results of {args.build} into {args.readme}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
