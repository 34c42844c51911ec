"""The sweep's outputs from the results file: the Pareto front of tokens/s against priced area, its plot
(``pareto.png``) and its table (``front.md``).

The front is taken over the trials that were measured and keep every budget (``within_budget``): a point is
on it when no other such trial is at least as fast in no more area and strictly better in one. The plot shows
every measured trial (over budget in grey), the front as a staircase, the preset's current chip and K3's chip.
"""
from __future__ import annotations

import os
from pathlib import Path

from flow.dse.space import DsePreset
from flow.report_summary import K3_AREA_MM2, K3_TOKENS_PER_S
from flow.synth.spec import AREA_BUDGET_UM2


def pareto(rows: list[dict]) -> list[dict]:
    """The non-dominated measured, within-budget trials, by area (smallest first)."""
    ok = sorted((r for r in rows if r["status"] == "ok" and r["within_budget"]),
                key=lambda r: (r["area_mm2"], -r["tokens_per_s"]))
    front, best = [], float("-inf")
    for r in ok:
        if r["tokens_per_s"] > best:
            front.append(r)
            best = r["tokens_per_s"]
    return front


def current(rows: list[dict], preset: DsePreset) -> dict | None:
    """The trial of the preset's current chip, if it ran (every sweep starts with it)."""
    return next((r for r in rows if r["point"] == preset.current()), None)


def changes(point: dict, preset: DsePreset) -> str:
    """What a point changes in ChipParams, e.g. ``norm_lanes 8 -> 2, mac_banks 8 -> 4``."""
    base = preset.current()
    diff = [f"{k} {base[k]} -> {v}" for k, v in point.items() if base.get(k) != v]
    return ", ".join(diff) or "(the current chip)"


def _atomic_png(fig, path: Path) -> None:
    tmp = path.with_name(f".{path.name}.tmp.png")
    fig.savefig(tmp, dpi=120)
    os.replace(tmp, path)


def plot(rows: list[dict], preset: DsePreset, path: Path, command: str) -> Path:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    measured = [r for r in rows if r["status"] == "ok"]
    front = pareto(rows)
    fig, ax = plt.subplots(figsize=(8, 5.5))
    for within, style in ((True, dict(c="tab:blue", label="trial within budget")),
                          (False, dict(c="0.6", marker="x", label="trial over a budget"))):
        pts = [r for r in measured if bool(r["within_budget"]) == within]
        if pts:
            ax.scatter([r["area_mm2"] for r in pts], [r["tokens_per_s"] for r in pts], s=22, **style)
    if front:
        xs = [r["area_mm2"] for r in front]
        ys = [r["tokens_per_s"] for r in front]
        ax.step(xs, ys, where="post", c="tab:red", lw=1.5, label="Pareto front")
    cur = current(rows, preset)
    if cur and cur["status"] == "ok":
        ax.scatter([cur["area_mm2"]], [cur["tokens_per_s"]], marker="*", s=220, c="tab:orange", edgecolors="k",
                   label=f"current {preset.chip} chip", zorder=5)
    if preset.design == "chip":
        ax.scatter([K3_AREA_MM2], [K3_TOKENS_PER_S], marker="D", s=70, c="k", label="K3's chip", zorder=5)
        ax.axvline(AREA_BUDGET_UM2 / 1e6, ls="--", c="0.4", lw=1, label="area budget (SPEC section 9)")
    what = "chip" if preset.design == "chip" else f"{preset.design} block alone"
    ax.set_xlabel(f"priced area of the {what}, mm2 (logic + macros, SPEC section 5)")
    ax.set_ylabel("tokens/s at 100 MHz (performance model, long run)")
    ax.set_title(f"Design-space sweep '{preset.name}': {len(measured)} measured of {len(rows)} trials")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="best")
    fig.text(0.01, 0.005, f"data: {command}", fontsize=7, color="0.3")
    fig.tight_layout(rect=(0, 0.02, 1, 1))
    _atomic_png(fig, path)
    plt.close(fig)
    return path


def _fmt(v, spec: str = ",.0f") -> str:
    return "-" if v is None else format(v, spec)


def table(rows: list[dict], preset: DsePreset, validations: list[dict], command: str) -> str:
    """front.md: the counts, the front, the best point within the area budget, the validations."""
    front = pareto(rows)
    by = {s: [r for r in rows if r["status"] == s] for s in ("ok", "illegal", "failed")}
    over = [r for r in by["ok"] if not r["within_budget"]]
    lines = [f"# Design-space sweep `{preset.name}` ({preset.doc})", "",
             f"Data: `{command}`. {len(rows)} trials: {len(by['ok'])} measured ({len(over)} over a budget), "
             f"{len(by['illegal'])} illegal, {len(by['failed'])} failed.", "",
             "## Pareto front (measured, within every budget)", "",
             "| trial | priced mm2 | tokens/s | cycles/token | slow WNS ns | changes to ChipParams |",
             "|---:|---:|---:|---:|---:|---|"]
    lines += [f"| {r['number']} | {r['area_mm2']:.3f} | {r['tokens_per_s']:,.0f} | {r['cycles_per_token']:,.1f} "
              f"| {_fmt(r['slow_wns_ns'], '.3f')} | {changes(r['point'], preset)} |" for r in front]
    if front:
        best = max(front, key=lambda r: r["tokens_per_s"])
        lines += ["", f"Best within the budgets: trial {best['number']}, {best['tokens_per_s']:,.0f} tokens/s in "
                  f"{best['area_mm2']:.3f} mm2: {changes(best['point'], preset)}."]
    cur = current(rows, preset)
    if cur and cur["status"] == "ok":
        lines += [f"Current {preset.chip} chip: trial {cur['number']}, {cur['tokens_per_s']:,.0f} tokens/s in "
                  f"{cur['area_mm2']:.3f} mm2" + (f" ({cur['reason']})" if cur["reason"] else "") + "."]
    if over or by["illegal"] or by["failed"]:
        lines += ["", "## Trials over a budget, illegal or failed", "", "| trial | status | point | reason |",
                  "|---:|---|---|---|"]
        lines += [f"| {r['number']} | {r['status']} | {changes(r['point'], preset)} | {r['reason']} |"
                  for r in over + by["illegal"] + by["failed"]]
    if validations:
        lines += ["", "## Validation: estimate against measurement", "",
                  "| point | bit-exact | model cycles | RTL cycles | error | parts mm2 | full synthesis mm2 | error "
                  "| passed |", "|---|---|---:|---:|---:|---:|---:|---:|---|"]
        lines += [f"| {changes(v['point'], preset)} | {bool(v['bit_exact'])} | {_fmt(v['model_cycles'])} | "
                  f"{_fmt(v['sim_cycles'])} | {_fmt(v['cycles_error'], '+.2%')} | {_fmt(v['parts_area_um2'] and v['parts_area_um2'] / 1e6, '.3f')} "
                  f"| {_fmt(v['full_area_um2'] and v['full_area_um2'] / 1e6, '.3f')} | {_fmt(v['area_error'], '+.2%')} "
                  f"| {bool(v['passed'])}{'' if v['passed'] else ': ' + str(v['reason'])} |" for v in validations]
    return "\n".join(lines) + "\n"


def write_outputs(rows: list[dict], preset: DsePreset, validations: list[dict], out: Path, command: str) -> list[Path]:
    """pareto.png and front.md in ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    md = out / "front.md"
    tmp = md.with_name(".front.md.tmp")
    tmp.write_text(table(rows, preset, validations, command))
    os.replace(tmp, md)
    return [plot(rows, preset, out / "pareto.png", command), md]
