"""Power and energy per token of the whole chip, from the switching activity of its own netlist running the short
run (the measured figure), at the typical corner.

    python -m flow.chip_power --synth build/synth --rtl build/rtl --out build/chip_power
                              [--bench build/bench/bench.json | --tokens-per-s N] [--trace <vcd>]  (make chip-power)

1. The RTL runs the short run (SPEC §8's public seed, the ``short`` timing profile) with its top-level ports traced,
   and the synthesised netlist replays it gate by gate (verification.replay: every part, the SPEC macros, every
   output compared in every cycle; the run must be equal). Every library cell's output pins are outputs of the
   graphs, and their changes from one cycle to the next are counted from reset to the end.
2. OpenSTA prices every cell of the chip's netlist (flow.power_sta: at global activity 0 and 1, linear in
   between, checked at a third point) and each is evaluated at its outputs' measured transitions per cycle
   (flow.power.combine): internal, switching and leakage power of the logic.
3. The ``msh_sram`` instances mapped to fakeram45 tiles (flow.macro_map) add their liberty's leakage, clock and
   pin energies at the accesses the replay made (flow.macro_power).
4. For comparison, OpenSTA's own default activity (0.1 transitions per cycle at the inputs, propagated): this
   OpenSTA crashes on the whole chip, so each engine's part is linked and reported on its own, and the parts where
   it crashes too are named.

Power is grouped by engine (synth.json's hierarchy). Energy per token = total power / tokens per second of the
throughput run of ``--bench`` (``make bench``), or ``--tokens-per-s``. Not included, and said so in the JSON: the
clock tree (the clock is ideal before placement), the ``msh_rom`` tables and the ``msh_sram``s mapped to
flip-flops (both become logic only at placement), wires beyond the wire-load model.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from flow.activity import Activity
from flow.cell_models import DEFAULT_OUT as CELL_MODELS_OUT
from flow.cell_models import ensure_models
from flow.floorplan import engines_of as floorplan_engines
from flow.macro_map import map_design, storage_lib
from flow.macro_power import MacroPowerError, read_fakeram_lib, sram_power
from flow.power import PowerError, check_linearity, instance_powers, rate_stats, token_rate
from flow.power_sta import COLUMNS, PowerStaError, default_power, run as sta_power
from flow.synth import design_period_ns
from pdk_config import PdkError, find_pdk

REPO = Path(__file__).resolve().parent.parent
SCHEMA = 1
NOT_INCLUDED = ("clock tree (ideal clock before placement)", "msh_rom tables (logic only at placement)",
                "msh_sram instances mapped to flip-flops (logic only at placement)")


def engine_of(path: str, engines: list[str], rest: str) -> str:
    """The engine (``core/mac``) whose instance path ``path`` starts with, the deepest first; ``rest`` if none."""
    return next((e for e in engines if path == e or path.startswith(e + "/")), rest)


def engines_of(synth: dict) -> tuple[list[str], str]:
    """synth.json's engines as instance paths (``core/mac``), the deepest first, and the name of the cells outside
    them, as flow.floorplan reads them."""
    names, rest, _ = floorplan_engines(synth)
    return sorted(names, key=lambda n: -n.count("/")), rest


def replay_with_toggles(synth_dir: Path, rtl_dir: Path, out: Path, trace: Path | None, cells_v: Path,
                        outputs: dict[str, list[str]], log=print):
    """The gate-level replay of the short run (cell models ``cells_v``) with the toggles of every output pin of
    every cell counted (``outputs``: cell -> its output pins): (chip, replay record, RTL run report or None)."""
    from verification.replay import Chip, ReplayError, record_run, replay
    from verification.vcd import read_cycles
    try:
        run = None
        if trace is None:
            log(f"[chip_power] RTL short run with the top-level ports traced ({rtl_dir}) ...")
            trace, run = record_run(rtl_dir, out)
        cycles = read_cycles(trace)
        chip = Chip(synth_dir, rtl_dir, out / "graphs", cells_v, log=log, cell_outputs=outputs)
        rec = replay(chip, cycles, log=log)
    except ReplayError as e:
        raise PowerError(f"gate-level replay: {e}") from None
    if not rec["equal"]:
        raise PowerError(f"the netlist differs from the RTL at cycle {rec['first_difference']['cycle']}: its activity "
                         "is not that of the run; see verification.replay")
    return chip, {**rec, "trace": str(trace)}, run


def activity_of(chip, top: str) -> Activity:
    act = Activity(top, chip.counted)
    for inst, (kind, pins) in chip.cell_toggles().items():
        act.pins[inst], act.cell_type[inst] = pins, kind
    return act


def macro_power(synth: dict, chip, freq_hz: float) -> list[dict]:
    """Each msh_sram mapped to fakeram45 tiles, priced from their liberty at the pin transitions of the run."""
    pdk = find_pdk()
    libs = {r.lib.stem: r.lib for r in pdk.fakerams}
    mappings = {m.path: m for m in map_design(synth["macros"]["instances"], storage_lib(pdk, REPO / "build" /
                                                                                        "pdk_cache"))}
    rows = []
    for m in chip.srams:
        mapping = mappings[m.path]
        if mapping.impl != "macros":
            continue
        if mapping.macro.name not in libs:
            raise MacroPowerError(f"{m.path}: no liberty for {mapping.macro.name} in {pdk.root}/lib")
        toggles = {name: int(chip.toggles[m.part][pin.index].sum()) for name, pin in m.ins.items()}
        row = sram_power(mapping, read_fakeram_lib(libs[mapping.macro.name]), toggles, chip.counted, freq_hz)
        rows.append({**row, "reads": m.reads, "writes": m.writes})
    return rows


def defaults_by_part(liberty: Path, netlist: Path, parts: dict[str, str], period: float, out: Path, log=print):
    """OpenSTA's default-activity totals of each engine's part linked on its own: {engine: W or None (failed)}."""
    def one(item):
        engine, module = item
        try:
            return engine, default_power(liberty, netlist, module, period, out / engine.replace("/", "."))["total"]
        except PowerStaError as e:
            log(f"[chip_power] default activity of {module}: {e}")
            return engine, None
    with ThreadPoolExecutor(2) as pool:
        return dict(pool.map(one, parts.items()))


def measure(synth_dir: Path, rtl_dir: Path, out: Path, rate: dict | None, trace: Path | None = None,
            log=print) -> dict:
    out = Path(out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    synth = json.loads((Path(synth_dir) / "synth.json").read_text())
    top, period = synth["top"], design_period_ns(None, synth, PowerError)
    t0 = time.monotonic()
    models = ensure_models(CELL_MODELS_OUT)
    outputs = {name: list(c["outputs"]) for name, c in models.cells.items()}
    chip, rec, run = replay_with_toggles(Path(synth_dir), Path(rtl_dir).resolve(), out, trace, models.verilog,
                                         outputs, log)
    t_sim = time.monotonic() - t0
    activity = activity_of(chip, top)
    try:
        liberty = find_pdk().plain_liberty("typical", REPO / "build" / "pdk_cache")
        netlist = Path(synth_dir) / synth["files"]["sta_netlist"]
        log(f"[chip_power] OpenSTA: {len(activity.pins):,} cells at activity 0 and 1 ...")
        sta = sta_power(liberty, netlist, top, period, out / "sta", default=False)
        engines, rest = engines_of(synth)
        parts = {e: f"{top}.{e.replace('/', '.')}" for e in engines}
        log(f"[chip_power] OpenSTA's default activity, {len(parts)} engines one by one ...")
        defaults = defaults_by_part(liberty, netlist, parts, period, out / "default", log)
        macros = macro_power(synth, chip, 1e9 / period)
    except (PdkError, PowerStaError, MacroPowerError) as e:
        raise PowerError(str(e)) from None
    linear = check_linearity(sta)
    by = {e: {"engine": e, **{f"{c}_mW": 0.0 for c in COLUMNS}, "macros_mW": 0.0, "cells": 0}
          for e in [*engines, rest]}
    rates = []
    for inst, a, power in instance_powers(sta, activity, outputs):
        row = by[engine_of(inst, engines, rest)]
        row["cells"] += 1
        rates.append(a)
        for c, p in zip(COLUMNS, power):
            row[f"{c}_mW"] += p * 1e3
    for m in macros:
        by[engine_of(m["path"][len(top) + 1:].replace(".", "/"), engines, rest)]["macros_mW"] += \
            (m["leakage_W"] + m["clock_W"] + m["pins_W"]) * 1e3
    stats = rate_stats(rates)
    for row in by.values():
        row["total_mW"] = sum(row[f"{c}_mW"] for c in COLUMNS) + row["macros_mW"]
        row["default_activity_mW"] = defaults[row["engine"]] * 1e3 if defaults.get(row["engine"]) else None
    rows = sorted(by.values(), key=lambda r: -r["total_mW"])
    logic = {c: sum(r[f"{c}_mW"] for r in rows) for c in COLUMNS}
    macro_mw = {k: sum(m[f"{k}_W"] for m in macros) * 1e3 for k in ("leakage", "clock", "pins")}
    total = sum(logic.values()) + sum(macro_mw.values())
    ran = [r for r in rows if r["default_activity_mW"] is not None]
    record = {
        "schema": SCHEMA, "measured": "total_mW", "corner": "typical", "clock_ns": period, "top": top,
        "synth_inputs_sha256": synth.get("inputs_sha256"), "synth_config_sha256": synth["rtl"].get("config_sha256"),
        "netlist": str(netlist), "run": run and {k: run.get(k) for k in ("name", "bit_exact", "cycles", "passed")},
        "replay": {k: rec[k] for k in ("cycles", "compared", "equal", "run_s", "trace")}, "cycles_counted":
        chip.counted, "cells": len(sta.at0), "logic": {f"{c}_mW": logic[c] for c in COLUMNS},
        "macros": {"tiles": sum(m["tiles"] for m in macros), **{f"{k}_mW": v for k, v in macro_mw.items()},
                   "instances": macros},
        "total_mW": total, "activity": stats, "linearity": linear, "engines": rows, "not_included": NOT_INCLUDED,
        "default_activity": {
            "what": "OpenSTA's default (0.1 transitions per cycle at the inputs, propagated), each engine's part "
                    "linked on its own (the whole chip crashes this OpenSTA); logic only",
            "engines_run": [r["engine"] for r in ran],
            "engines_failed": [r["engine"] for r in rows if r["engine"] != rest and r["default_activity_mW"] is None],
            "total_mW": sum(r["default_activity_mW"] for r in ran),
            "measured_logic_mW_same_engines": sum(r["total_mW"] - r["macros_mW"] for r in ran)},
        "sim_s": round(t_sim, 1), "power_s": round(time.monotonic() - t0 - t_sim, 1)}
    if rate:
        record.update({"tokens_per_s": rate["tokens_per_s"], "tokens_per_s_source": rate["source"],
                       "energy_uJ_per_token": total * 1e-3 / rate["tokens_per_s"] * 1e6,
                       "tokens_per_s_per_W": rate["tokens_per_s"] / (total * 1e-3)})
    return record


def draw(rec: dict, path: Path) -> dict:
    """Bars: each engine's measured power (logic internal, switching, leakage, and its macros) stacked; OpenSTA's
    default activity (logic only) as a cross where it ran."""
    from flow.report_figures import plt_, save
    rows = sorted(rec["engines"], key=lambda r: r["total_mW"])
    names = [r["engine"] for r in rows]
    fig, ax = plt_().subplots(figsize=(7.5, 1.2 + 0.4 * len(rows)))
    left = [0.0] * len(rows)
    for key, color, label in (("internal_mW", "tab:blue", "internal"), ("switching_mW", "tab:orange", "switching"),
                              ("leakage_mW", "tab:gray", "leakage"), ("macros_mW", "tab:green", "fakeram45 macros")):
        vals = [r[key] for r in rows]
        ax.barh(names, vals, left=left, color=color, label=label)
        left = [a + b for a, b in zip(left, vals)]
    ran = [(r["default_activity_mW"], r["engine"]) for r in rows if r["default_activity_mW"] is not None]
    if ran:
        ax.plot(*zip(*ran), "kx", label="OpenSTA default activity (logic)")
    ax.set_xlabel("power (mW), typical corner, activity of the gate-level short run")
    ax.set_ylabel("engine")
    energy = f", {rec['energy_uJ_per_token']:.3f} uJ/token" if "energy_uJ_per_token" in rec else ""
    ax.set_title(f"chip power by engine: {rec['total_mW']:.1f} mW{energy}")
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8)
    return save(fig, ax, Path(path))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m flow.chip_power", description=__doc__.split("\n\n")[0])
    ap.add_argument("--synth", type=Path, required=True, help="flow.synth folder of the chip")
    ap.add_argument("--rtl", type=Path, required=True, help="the RTL folder it was synthesised from")
    ap.add_argument("--out", type=Path, default=REPO / "build" / "chip_power")
    ap.add_argument("--trace", type=Path, help="a VCD of the chip's ports to replay (default: record the short run)")
    ap.add_argument("--bench", type=Path, help="take the token rate from this make bench JSON")
    ap.add_argument("--tokens-per-s", type=float, help="token rate for energy per token")
    args = ap.parse_args(argv)
    t0 = time.monotonic()
    (args.out / "chip_power.json").unlink(missing_ok=True)      # a failed run leaves no earlier record behind
    try:
        rate = token_rate(args.tokens_per_s, args.bench)
        rec = measure(args.synth, args.rtl, args.out, rate, args.trace,
                      log=lambda s: print(s, flush=True))
        rec["figure"] = str((args.out / "power_by_engine.png").resolve())
        rec["drawn"] = draw(rec, args.out / "power_by_engine.png")
    except PowerError as e:
        print(f"flow.chip_power: error: {e}", file=sys.stderr)
        return 1
    rec["command"] = "python -m flow.chip_power " + " ".join(sys.argv[1:] if argv is None else argv)
    rec["wall_s"] = round(time.monotonic() - t0, 1)
    tmp = args.out / "chip_power.json.tmp"
    tmp.write_text(json.dumps(rec, indent=1) + "\n")
    tmp.replace(args.out / "chip_power.json")
    energy = (f"; {rec['energy_uJ_per_token']:.4f} uJ/token, {rec['tokens_per_s_per_W']:,.0f} tokens/s/W at "
              f"{rec['tokens_per_s']:,.0f} tokens/s ({rec['tokens_per_s_source']})" if "tokens_per_s" in rec else "")
    print(f"[chip_power] {rec['total_mW']:.2f} mW at the typical corner (logic {sum(rec['logic'].values()):.2f}, "
          f"macros {rec['macros']['leakage_mW'] + rec['macros']['clock_mW'] + rec['macros']['pins_mW']:.2f}) over "
          f"{rec['cycles_counted']:,} cycles{energy}; OpenSTA's default activity: "
          f"{rec['default_activity']['total_mW']:.2f} mW for the engines it ran, measured "
          f"{rec['default_activity']['measured_logic_mW_same_engines']:.2f}; wrote {args.out / 'chip_power.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
