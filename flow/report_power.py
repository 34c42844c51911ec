"""The report's power section: ``make power``'s build/power/power.json (flow.power), its bar chart by engine
and the energy per token beside the token rate it was divided by."""
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


def md_power(stages: dict, embed) -> list[str]:
    rec = stages["power"]["data"]
    md = ["## Power and energy (make power)", ""]
    if rec is None:
        return md + [f"Not measured yet (`{COMMAND}`).", ""]
    md += [f"Measured at the typical corner, preset {rec.get('preset')}: **{fmt_num(rec['total_mW'], '.3f')} mW** "
           f"(internal {fmt_num(rec['internal_mW'], '.3f')}, switching {fmt_num(rec['switching_mW'], '.3f')}, "
           f"leakage {fmt_num(rec['leakage_mW'], '.3f')} mW); OpenSTA's default activity would say "
           f"{fmt_num(rec['default_activity_total_mW'], '.3f')} mW (not measured). Scope: {rec['scope']}.", ""]
    if "tokens_per_s" in rec:
        md += [f"| tokens/s | energy per token | tokens/s per W | token rate from |", "|---|---|---|---|",
               f"| {fmt_num(rec['tokens_per_s'], ',.0f')} | {fmt_num(rec['energy_uJ_per_token'], '.4f')} uJ | "
               f"{fmt_num(rec['tokens_per_s_per_W'], ',.0f')} | `{rec['tokens_per_s_source']}` |", ""]
    md += ["| engine | cells | cycles | internal mW | switching mW | leakage mW | total mW | default-activity mW |",
           "|---|---|---|---|---|---|---|---|"]
    md += [f"| {e['block']} | {e['cells']:,} | {e['cycles']:,} | {e['internal_mW']:.3f} | {e['switching_mW']:.3f} | "
           f"{e['leakage_mW']:.3f} | {e['total_mW']:.3f} | {e['default_activity']['total_mW']:.3f} |"
           for e in rec["engines"]]
    return md + [""] + embed("power")
