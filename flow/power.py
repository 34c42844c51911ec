"""Power and energy from measured switching activity: a block's netlist run at gate level, its toggles per cell
pin counted, and OpenSTA's typical-corner power of every cell at that activity.

    python -m flow.power --preset tiny --blocks dequant_mac mac_array --out build/power
                         [--tokens-per-s N | --bench build/bench/bench.json] [--env KEY=VALUE ...]
    python -m flow.power --synth build/synth-dm --block dequant_mac --out build/power   (a netlist already made)

Per block: the netlist runs under its own cocotb testbench (``verification.gatesim``, bit-exact checks on)
with Verilator toggle coverage (``flow.activity``); each cell's activity is the mean transitions per clock
cycle of its outputs over the whole run; OpenSTA gives each cell's internal, switching and leakage power as
a linear function of activity (``flow.power_sta``, which says why: this OpenSTA ignores per-pin activity),
evaluated there. The figure with OpenSTA's default activity (0.1 at the inputs, propagated) is reported
beside it; the measured one is ``total_mW``.

Scope, stated in the JSON: the activity is that of each block's testbench (its cases back to back), not of
the chip running tokens; no clock tree (the clock is ideal before placement); the ``msh_sram`` / ``msh_rom``
macros of a block are listed but their power is not included (``macros_not_included``).
``energy_uJ_per_token`` = total power / tokens per second, when a token rate is given (``--tokens-per-s``,
or the throughput run of a ``verification.bench`` JSON or a ``make sim`` summary), which the JSON names.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import sys
import time
from pathlib import Path

from flow.activity import COVERAGE_FILE, TOGGLE_BUILD, TOGGLE_RUN, ActivityError, read_coverage
from flow.cell_models import DEFAULT_OUT as CELL_MODELS_OUT
from flow.cell_models import ensure_models
from flow.power_sta import COLUMNS, LINEARITY_PROBE, PowerStaError, run as sta_power
from flow.synth import design_period_ns
from pdk_config import PdkError, find_pdk

REPO = Path(__file__).resolve().parent.parent
SCHEMA = 1
NETLIST_DIGEST = "netlist.sha256"   # beside a gate-level run: the netlist it simulated (for --reuse-sim)
LINEARITY_TOLERANCE = 0.01          # relative: OpenSTA's totals at LINEARITY_PROBE vs P0 + a (P1 - P0)


class PowerError(RuntimeError):
    """The power step cannot run or its inputs disagree; the message says what and how to fix it."""


def _mw(w: float) -> float:
    return round(w * 1e3, 6)


def instance_powers(sta, activity, outputs: dict[str, list[str]]):
    """(instance, activity, (internal, switching, leakage) W) of every instance OpenSTA priced, at the mean
    transitions per cycle of its outputs (``outputs``: cell -> output pins)."""
    missing = [i for i in sta.at0 if i not in activity.pins]
    if missing:
        raise PowerError(f"{len(missing)} of {len(sta.at0)} netlist instances have no toggle counts (first: "
                         f"{missing[:5]}): the simulated netlist is not the one OpenSTA read")
    for inst, p0 in sta.at0.items():
        p1 = sta.at1[inst]
        a = activity.rate(inst, outputs[activity.cell_type[inst]])
        yield inst, a, tuple(p0[k] + a * (p1[k] - p0[k]) for k in range(len(COLUMNS)))


def rate_stats(rates: list[float]) -> dict:
    rates = sorted(rates)
    return {"cells": len(rates), "mean": round(sum(rates) / len(rates), 6), "median": round(rates[len(rates) // 2], 6),
            "max": round(rates[-1], 6), "idle_cells": sum(r == 0 for r in rates)}


def combine(sta, activity, outputs: dict[str, list[str]]) -> tuple[dict[str, float], dict]:
    """Each instance's power at its measured activity, summed (W per column), and the activity statistics."""
    sums = dict.fromkeys(COLUMNS, 0.0)
    rates = []
    for _, a, power in instance_powers(sta, activity, outputs):
        rates.append(a)
        for col, p in zip(COLUMNS, power):
            sums[col] += p
    return sums, rate_stats(rates)


def check_linearity(sta) -> dict:
    """OpenSTA's own totals at LINEARITY_PROBE against the per-instance line through 0 and 1."""
    predicted = {c: sum(p0[k] + LINEARITY_PROBE * (sta.at1[i][k] - p0[k]) for i, p0 in sta.at0.items())
                 for k, c in enumerate(COLUMNS)}
    for c in COLUMNS:
        got = sta.probe[c]
        if abs(predicted[c] - got) > LINEARITY_TOLERANCE * max(abs(got), 1e-12):
            raise PowerError(f"OpenSTA's {c} power at global activity {LINEARITY_PROBE} is {got:.4e} W, the "
                             f"per-instance line predicts {predicted[c]:.4e} W: the power is not linear in the "
                             f"activity, so this method does not apply to this OpenSTA build")
    return {"probe_activity": LINEARITY_PROBE, "tolerance": LINEARITY_TOLERANCE, "held": True}


def _digest(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def _earlier_run(out: Path, netlist: Path) -> dict | None:
    """The gate-level run already in ``out`` (gatesim.json, coverage) if it passed on this very netlist."""
    summary, cov, digest = (out / "sim" / n for n in ("gatesim.json", COVERAGE_FILE, NETLIST_DIGEST))
    if not (summary.is_file() and cov.is_file() and digest.is_file()):
        return None
    sim = json.loads(summary.read_text())
    return sim if sim.get("passed") and digest.read_text().strip() == _digest(netlist) else None


def measure_block(synth_dir: Path, block: str, out: Path, env: dict[str, str] | None = None,
                  cell_models: Path = CELL_MODELS_OUT, quick_build: bool = True, reuse_sim: bool = False) -> dict:
    """Gate-level run with toggle counts, OpenSTA power, combined: the block's power record (also <out>/power.json).
    ``reuse_sim``: price the passed gate-level run already in ``out`` again if it ran this netlist (same digest)."""
    from verification.gatesim import GateSimError, gatesim
    from verification.runner import SimFailure
    out = Path(out).resolve()
    synth = json.loads((Path(synth_dir) / "synth.json").read_text())
    top, period = synth["top"], design_period_ns(None, synth, PowerError)
    t0 = time.monotonic()
    sim_netlist = Path(synth_dir) / synth["files"]["netlist"]
    sim = _earlier_run(out, sim_netlist) if reuse_sim else None
    try:
        if sim is None:
            (out / "sim" / NETLIST_DIGEST).unlink(missing_ok=True)
            _, sim = gatesim(Path(synth_dir), block, out / "sim", cell_models, env=env, quick_build=quick_build,
                             build_args=TOGGLE_BUILD, test_args=TOGGLE_RUN)
            (out / "sim" / NETLIST_DIGEST).write_text(_digest(sim_netlist) + "\n")
        activity = read_coverage(out / "sim" / COVERAGE_FILE, top)
        models = ensure_models(Path(cell_models))
        liberty = find_pdk().plain_liberty("typical", REPO / "build" / "pdk_cache")
    except (GateSimError, SimFailure, ActivityError, PdkError) as e:
        raise PowerError(str(e)) from None
    t_sim = time.monotonic() - t0
    netlist = Path(synth_dir) / synth["files"]["sta_netlist"]
    try:
        sta = sta_power(liberty, netlist, top, period, out / "sta")
    except PowerStaError as e:
        raise PowerError(str(e)) from None
    linear = check_linearity(sta)
    outputs = {name: list(cell["outputs"]) for name, cell in models.cells.items()}
    sums, stats = combine(sta, activity, outputs)
    record = {"schema": SCHEMA, "block": block, "top": top, "netlist": str(netlist), "corner": "typical",
              "clock_ns": period, "cycles": activity.cycles, "cells": len(sta.at0),
              "macros_not_included": sim["macros"],
              **{f"{c}_mW": _mw(sums[c]) for c in COLUMNS}, "total_mW": _mw(sum(sums.values())),
              "default_activity": {**{f"{c}_mW": _mw(sta.default[c]) for c in COLUMNS},
                                   "total_mW": _mw(sta.default["total"])},
              "activity": stats, "linearity": linear, "gatesim_passed": sim["passed"], "tests": sim["tests"],
              "gatesim": {k: sim[k] for k in ("build_s", "run_s", "log")},
              "sim_s": round(t_sim, 1), "sta_s": round(time.monotonic() - t0 - t_sim, 1),
              "files": {"coverage": str(out / "sim" / COVERAGE_FILE), "sta_tcl": str(out / "sta" / "power.tcl")}}
    (out / "power.json").write_text(json.dumps(record, indent=1) + "\n")
    return record


def token_rate(tokens_per_s: float | None, bench: Path | None, preset_name: str | None = None) -> dict | None:
    """The token rate energy per token divides by, and where it comes from (None: no rate given). A run read
    from ``bench`` must be of ``preset_name`` (its name starts with it): the engines' power is that preset's."""
    if tokens_per_s is not None:
        if tokens_per_s <= 0:
            raise PowerError(f"--tokens-per-s must be positive, got {tokens_per_s}")
        return {"tokens_per_s": tokens_per_s, "source": "--tokens-per-s"}
    if bench is None:
        return None
    if not Path(bench).is_file():
        raise PowerError(f"{bench} not found: run make bench first, or pass --tokens-per-s")
    b = json.loads(Path(bench).read_text())
    if isinstance(b.get("throughput"), dict) and b["throughput"].get("tokens_per_s"):      # make sim's summary.json
        name, tps = b["throughput"]["run"], b["throughput"]["tokens_per_s"]
    else:
        run = next((r for r in b.get("runs", []) if r.get("name") == b.get("throughput_run")), None)
        if run is None or not run.get("tokens_per_s"):
            raise PowerError(f"{bench} has no throughput run with tokens_per_s (throughput_run = "
                             f"{b.get('throughput_run')!r}, throughput = {b.get('throughput')!r}): rerun make bench "
                             f"or make sim")
        name, tps = run["name"], run["tokens_per_s"]
    if preset_name and not name.startswith(preset_name + "-"):
        raise PowerError(f"{bench}'s throughput run {name!r} is not of preset {preset_name!r}, whose engines are "
                         f"measured: simulate the {preset_name} chip (make rtl sim with rtl_gen --preset "
                         f"{preset_name}) or pass --tokens-per-s")
    return {"tokens_per_s": tps, "source": f"{bench} run {name}"}


def summarise(engines: list[dict], rate: dict | None, preset_name: str | None) -> dict:
    """The chip-level record: the engines' powers summed, and energy per token at ``rate``."""
    total = {f"{c}_mW": round(sum(e[f"{c}_mW"] for e in engines), 6) for c in COLUMNS}
    total_mw = round(sum(e["total_mW"] for e in engines), 6)
    default_mw = round(sum(e["default_activity"]["total_mW"] for e in engines), 6)
    rec = {"schema": SCHEMA, "preset": preset_name, "corner": "typical", "measured": "total_mW",
           "scope": "each engine's netlist at the switching activity of its own block testbench (gate-level, "
                    "toggle counts per cell pin); not the chip's token run; no clock tree; macros not included",
           **total, "total_mW": total_mw, "default_activity_total_mW": default_mw,
           "engines": [{k: e[k] for k in ("block", "cells", "cycles", "internal_mW", "switching_mW", "leakage_mW",
                                          "total_mW", "default_activity", "macros_not_included", "activity")}
                       for e in engines]}
    if rate:
        tps = rate["tokens_per_s"]
        rec.update({"tokens_per_s": tps, "tokens_per_s_source": rate["source"],
                    "energy_uJ_per_token": round(total_mw * 1e-3 / tps * 1e6, 6),
                    "tokens_per_s_per_W": round(tps / (total_mw * 1e-3), 3)})
    return rec


def draw_power(rec: dict, path: Path) -> dict:
    """Bars: each engine's measured power (internal, switching, leakage stacked), OpenSTA's default as a cross.
    Returns what the figure shows (flow.report_figures.save)."""
    from flow.report_figures import plt_, save
    engines = sorted(rec["engines"], key=lambda e: e["total_mW"])
    names = [e["block"] for e in engines]
    fig, ax = plt_().subplots(figsize=(7, 1.2 + 0.45 * len(engines)))
    left = [0.0] * len(engines)
    for col, color in zip(COLUMNS, ("tab:blue", "tab:orange", "tab:gray")):
        vals = [e[f"{col}_mW"] for e in engines]
        ax.barh(names, vals, left=left, color=color, label=col)
        left = [a + b for a, b in zip(left, vals)]
    ax.plot([e["default_activity"]["total_mW"] for e in engines], names, "kx", label="OpenSTA default activity")
    ax.set_xlabel("power (mW), typical corner, measured activity")
    ax.set_ylabel("engine (its own netlist)")
    ax.set_title(f"power by engine ({rec.get('preset') or 'one block'}): {rec['total_mW']:.3f} mW")
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8)     # outside: bars reach the right edge
    return save(fig, ax, Path(path))


def measure_preset(preset_name: str, blocks: list[str], out: Path, env: dict[str, str],
                   rate: dict | None, reuse_sim: bool = False) -> dict:
    """Emit, synthesise and measure each block of the preset; out/power.json holds the summary."""
    from flow.blocks import emit_and_synthesise
    out = Path(out).resolve()
    try:
        synths = emit_and_synthesise(blocks, preset_name, out, "power")
    except ValueError as e:
        raise PowerError(str(e)) from None
    engines = [measure_block(synth, b, out / b, env, reuse_sim=reuse_sim) for b, synth in synths.items()]
    rec = summarise(engines, rate, preset_name)
    draw_power(rec, out / "power_by_engine.png")
    rec["figure"] = str(out / "power_by_engine.png")
    (out / "power.json").write_text(json.dumps(rec, indent=1) + "\n")
    return rec


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m flow.power", description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=REPO / "build" / "power")
    ap.add_argument("--preset", default="tiny", help="chip preset the blocks are emitted at (hw.params.PRESETS)")
    ap.add_argument("--blocks", nargs="+", default=["dequant_mac"], help="engines to measure (rtl_gen.BLOCKS)")
    ap.add_argument("--synth", type=Path, help="measure this flow.synth folder instead (with --block)")
    ap.add_argument("--block", help="the block whose testbench drives --synth's netlist")
    ap.add_argument("--tokens-per-s", type=float, help="token rate for energy per token")
    ap.add_argument("--bench", type=Path, help="take the token rate from this verification.bench JSON "
                    "(build/bench/bench.json) or make sim summary (<sim out>/summary.json)")
    ap.add_argument("--reuse-sim", action="store_true", help="price a block's passed gate-level run again "
                    "if it ran the same netlist (no new simulation)")
    ap.add_argument("--env", action="append", default=[], metavar="KEY=VALUE", help="testbench environment")
    args = ap.parse_args(argv)
    bad = [e for e in args.env if "=" not in e]
    if bad or bool(args.synth) != bool(args.block):
        ap.error(f"--env takes KEY=VALUE, got {bad}" if bad else "--synth and --block go together")
    env = dict(e.split("=", 1) for e in args.env)
    try:
        rate = token_rate(args.tokens_per_s, args.bench, None if args.synth else args.preset)
        if args.synth:
            rec = summarise([measure_block(args.synth, args.block, args.out / args.block, env,
                                           reuse_sim=args.reuse_sim)], rate, None)
            args.out.mkdir(parents=True, exist_ok=True)
            (args.out / "power.json").write_text(json.dumps(rec, indent=1) + "\n")
        else:
            rec = measure_preset(args.preset, args.blocks, args.out, env, rate, args.reuse_sim)
    except PowerError as e:
        print(f"flow.power: error: {e}", file=sys.stderr)
        return 1
    rec["command"] = "python -m flow.power " + " ".join(sys.argv[1:] if argv is None else argv)
    (args.out / "power.json").write_text(json.dumps(rec, indent=1) + "\n")
    for e in rec["engines"]:
        print(f"{e['block']}: {e['total_mW']:.3f} mW measured (internal {e['internal_mW']:.3f}, switching "
              f"{e['switching_mW']:.3f}, leakage {e['leakage_mW']:.3f}) over {e['cycles']} cycles; OpenSTA default "
              f"activity {e['default_activity']['total_mW']:.3f} mW")
    energy = (f"; {rec['energy_uJ_per_token']:.4f} uJ/token, {rec['tokens_per_s_per_W']:.1f} tokens/s/W at "
              f"{rec['tokens_per_s']:.1f} tokens/s ({rec['tokens_per_s_source']})" if "tokens_per_s" in rec else "")
    print(f"total {rec['total_mW']:.3f} mW (typical corner){energy}; wrote {args.out / 'power.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
