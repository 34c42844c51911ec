"""The report's power section: the chip's own power (``make chip-power``'s build/chip_power/chip_power.json,
flow.chip_power: the netlist's activity in the gate-level short run), with its bar chart by engine and the energy
per token beside tokens/s; then ``make power``'s per-engine testbench figures (build/power/power.json)."""
from __future__ import annotations

from pathlib import Path

from flow.report_summary import fmt as fmt_num

COMMAND = "make power"


def fig_power_by_engine(stages: dict, path: Path) -> dict | None:
    """Measured power per engine, stacked internal / switching / leakage; OpenSTA's default activity marked."""
    rec = stages["power"]["data"]
    if rec is None:
        return None
    from flow.power import draw_power
    drawn = draw_power(rec, path)
    return {**drawn, "caption": "Power by engine at the typical corner, from each engine netlist's measured "
                                "switching activity (x: OpenSTA's default activity)",
            "commands": [stages["power"]["command"]], "note": rec["scope"]}


def _energy_table(rec: dict) -> list[str]:
    """Tokens/s, power, energy per token and tokens/s per W of a power record with a token rate (else nothing)."""
    if "tokens_per_s" not in rec:
        return []
    return ["| tokens/s | power | energy per token | tokens/s per W | token rate from |", "|---|---|---|---|---|",
            f"| {fmt_num(rec['tokens_per_s'], ',.0f')} | {fmt_num(rec['total_mW'], '.3f')} mW | "
            f"{fmt_num(rec['energy_uJ_per_token'], '.4f')} uJ | {fmt_num(rec['tokens_per_s_per_W'], ',.0f')} | "
            f"`{rec['tokens_per_s_source']}` |", ""]


def fig_chip_power(stages: dict, path: Path) -> dict | None:
    rec = stages["chip_power"]["data"]
    if rec is None:
        return None
    from flow.chip_power import draw
    return {**draw(rec, path), "caption": "The chip's power by engine at the typical corner, from its netlist's "
            "switching activity in the gate-level short run (x: OpenSTA's default activity, the engine on its own)",
            "commands": [stages["chip_power"]["command"]], "note": "not included: " + "; ".join(rec["not_included"])}


def md_chip_power(stages: dict, embed) -> list[str]:
    rec = stages["chip_power"]["data"]
    md = ["## Power and energy per token (make chip-power)", ""]
    if rec is None:
        return md + ["Not measured yet (`make chip-power`: the netlist replays the short run with every cell "
                     "output's toggles counted, OpenSTA prices the cells at that activity).", ""]
    m, d, lg = rec["macros"], rec["default_activity"], rec["logic"]
    run = (rec.get("run") or {}).get("name") or rec["replay"]["trace"]
    md += [f"`{rec['command']}`: the netlist ({rec['cells']:,} cells) replayed the RTL's run {run} equal in every "
           f"cycle; {rec['cycles_counted']:,} cycles of toggles after reset (mean {rec['activity']['mean']:.4f} "
           f"transitions per cycle per cell output, {rec['activity']['idle_cells']:,} cells never switch). "
           f"**Measured: {rec['total_mW']:.2f} mW** at the typical corner: logic internal "
           f"{lg['internal_mW']:.2f}, switching {lg['switching_mW']:.2f}, leakage {lg['leakage_mW']:.2f} mW; "
           f"{m['tiles']} fakeram45 tiles leakage {m['leakage_mW']:.2f}, clock {m['clock_mW']:.2f}, pins "
           f"{m['pins_mW']:.2f} mW. Not included: {'; '.join(rec['not_included'])}.", "",
           f"{d['what']}: {d['total_mW']:.2f} mW for the {len(d['engines_run'])} engines "
           f"it ran, where the measured activity gives {d['measured_logic_mW_same_engines']:.2f} mW"
           + (f"; it crashed on {', '.join(d['engines_failed'])}" if d["engines_failed"] else "") + ". The measured "
           "figure is the one above.", ""]
    md += _energy_table(rec)
    md += ["| engine | cells | internal mW | switching mW | leakage mW | macros mW | total mW | default-activity mW |",
           "|---|---|---|---|---|---|---|---|"]
    md += [f"| {e['engine']} | {e['cells']:,} | {e['internal_mW']:.3f} | {e['switching_mW']:.3f} | "
           f"{e['leakage_mW']:.3f} | {e['macros_mW']:.3f} | {e['total_mW']:.3f} | "
           f"{fmt_num(e['default_activity_mW'], '.3f')} |" for e in rec["engines"]]
    return md + [""] + embed("chip_power")


def md_power(stages: dict, embed) -> list[str]:
    rec = stages["power"]["data"]
    md = md_chip_power(stages, embed) + ["## Power of single engines under their own testbenches (make power)", ""]
    if rec is None:
        return md + [f"Not measured yet (`{COMMAND}`).", ""]
    md += [f"Measured at the typical corner, preset {rec.get('preset')}: **{fmt_num(rec['total_mW'], '.3f')} mW** "
           f"(internal {fmt_num(rec['internal_mW'], '.3f')}, switching {fmt_num(rec['switching_mW'], '.3f')}, "
           f"leakage {fmt_num(rec['leakage_mW'], '.3f')} mW); OpenSTA's default activity would say "
           f"{fmt_num(rec['default_activity_total_mW'], '.3f')} mW (not measured). Scope: {rec['scope']}.", ""]
    md += _energy_table(rec)
    md += ["| engine | cells | cycles | internal mW | switching mW | leakage mW | total mW | default-activity mW |",
           "|---|---|---|---|---|---|---|---|"]
    md += [f"| {e['block']} | {e['cells']:,} | {e['cycles']:,} | {e['internal_mW']:.3f} | {e['switching_mW']:.3f} | "
           f"{e['leakage_mW']:.3f} | {e['total_mW']:.3f} | {e['default_activity']['total_mW']:.3f} |"
           for e in rec["engines"]]
    return md + [""] + embed("power")
