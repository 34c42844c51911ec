"""The report's headline numbers, from the stage results ``flow.report.load`` read, and ``make demo``'s brief.

Correctness (simulation summary), speed (benchmark or the chip simulation's long run, and the same
cycles/token at the clock the placed chip closes), size (synthesis), timing (STA before and after
placement) and placement. Every number about our chip comes from the build's JSON; the reference
figures of SPEC_NANO_KPU.md §8 are the constants below.
"""
from __future__ import annotations

from pathlib import Path

from flow.runlog import runtime_text
from flow.synth import AREA_BUDGET_UM2, SRAM_BUDGET_BITS

# SPEC_NANO_KPU.md §8: tokens/s at 100 MHz on the long run (seed 20260706, group 128, 48 positions).
K3_TOKENS_PER_S = 8_721              # K3's chip: 550,420 cycles = 11,467 cycles/token
K3_AREA_MM2 = 3.97                   # K3's chip: logic + macros as SPEC §5 prices them (issue 20)
PORT_LIMIT_TOKENS_PER_S = 20_470     # reads + logits writes share one 16 B/cycle channel: ~4,886 beats/token
READ_ROOFLINE_TOKENS_PER_S = 21_022  # reads alone: 76,109 active bytes = 4,757 beats/token
READ_ROOFLINE_BEATS_PER_TOKEN = 4_757
COSINE_GATE, ARGMAX_GATE = 0.98, 0.99                  # SPEC §7


# ---------------------------------------------------------------------------------------------- correctness
def correctness(sim: dict | None) -> dict:
    """Verdict and, for the chip (a summary with runs), bit-exactness, min cosine and argmax agreement."""
    keys = ("level", "top", "tests", "failed", "bit_exact", "bit_exact_runs", "min_cosine", "argmax_agreement",
            "elasticity")
    if sim is None:
        return {"verdict": "not run", **dict.fromkeys(keys)}
    runs = sim.get("runs") or []
    out = {**dict.fromkeys(keys), "verdict": str(sim["verdict"]).upper(), "level": "chip" if runs else "block",
           "top": sim.get("top"), "tests": sim.get("tests"), "failed": sim.get("failed")}
    if runs:
        exact = sum(bool(r.get("bit_exact")) for r in runs)
        cos = [r["min_cosine"] for r in runs if r.get("min_cosine") is not None]
        argmax = (sim.get("argmax_agreement_pooled") or {}).get("value")
        if argmax is None:
            argmax = min((r["argmax_agreement"] for r in runs if r.get("argmax_agreement") is not None), default=None)
        out.update(bit_exact=exact == len(runs), bit_exact_runs=f"{exact}/{len(runs)}",
                   min_cosine=min(cos, default=None), argmax_agreement=argmax,
                   elasticity=(sim.get("elasticity") or {}).get("ratio"))
    return out


# ---------------------------------------------------------------------------------------------- speed
def _throughput_run(source: str, data: dict | None) -> dict | None:
    """The throughput run's numbers: make bench names it ``throughput_run`` among its ``runs``; the chip
    simulation's summary has a ``throughput`` entry naming one of its ``runs`` (which holds the beats)."""
    if not data:
        return None
    runs = {r.get("name"): r for r in data.get("runs") or [] if isinstance(r, dict)}
    if source == "bench":
        t = runs.get(data.get("throughput_run")) or data.get("throughput") or data
        run = t
    else:
        t = data.get("throughput")
        run = runs.get((t or {}).get("run")) or {}
    if not t or not t.get("tokens_per_s"):
        return None
    cpt = t.get("cycles_per_token")
    seq_len = (run.get("run") or {}).get("seq_len") or (t["cycles"] / cpt if t.get("cycles") and cpt else None)
    return {"run": t.get("run") if isinstance(t.get("run"), str) else t.get("name"), "cycles": t.get("cycles"),
            "cycles_per_token": cpt, "tokens_per_s": t["tokens_per_s"], "seq_len": seq_len,
            "read_beats": run.get("read_beats"), "write_beats": run.get("write_beats")}


def why_faster(sp: dict) -> str | None:
    """Why the measured tokens/s can exceed SPEC §8's read roofline and port limit (None if not measured)."""
    if not sp["measured"]:
        return None
    above = sp["tokens_per_s"] > min(PORT_LIMIT_TOKENS_PER_S, READ_ROOFLINE_TOKENS_PER_S)
    text = (f"{'above' if above else 'measured against'} SPEC §8's port limit {PORT_LIMIT_TOKENS_PER_S:,} and "
            f"read roofline {READ_ROOFLINE_TOKENS_PER_S:,} tokens/s: those assume every weight is streamed from "
            f"memory each token ({READ_ROOFLINE_BEATS_PER_TOKEN:,} read beats/token), while this chip keeps every "
            "weight on chip after one load of the tensor block, so per token it reads only the token's embedding "
            "row and writes its logits")
    if sp["beats_per_token"] is not None:
        text += (f" (the {sp['run'] or 'throughput'} run moved {sp['read_beats']:,} read + {sp['write_beats']:,} "
                 f"write beats = {sp['beats_per_token']:,.0f} beats/token, the one load included)")
    return text


def placed_clock(stages: dict, sp: dict) -> dict:
    """tokens/s at the clock the placed chip closes: the slowest corner's shortest period after sign-off's
    repair (else after placement, post-placement STA), the cycles/token unchanged. Equal to the measured
    figure once the placed chip closes the clock the measurement assumes (tokens/s × cycles/token)."""
    place_sta, place, signed = stages["place_sta"], stages["place"], stages.get("signoff", {"data": None})
    out = dict.fromkeys(("corner", "min_period_ns", "mhz", "clock_ns", "tokens_per_s", "closes"))
    sources = [(signed["data"]["corners"], signed)] if signed["data"] else []
    if place_sta["data"]:
        sources.append((place_sta["data"]["corners"], place_sta))
    elif place["data"] and place["data"]["sta"]:              # (null: placed with --no-sta)
        sources.append((place["data"]["sta"], place))             # place.json's copy of the same STA
    if not sources:
        return {**out, "status": "no placement", "command": place["command"], "path": place_sta["path"]}
    for corners, source in sources:                                # the first that has a period
        periods = {c: v["min_period_ns"] for c, v in corners.items() if v.get("min_period_ns") is not None}
        if periods:
            break
    else:
        return {**out, "status": "no period", "command": source["command"], "path": source["path"]}
    corner = max(periods, key=periods.get)
    out.update(status="placed", corner=corner, min_period_ns=periods[corner], path=source["path"],
               command=source["command"], mhz=1e3 / periods[corner])
    if sp["measured"] and sp["cycles_per_token"]:
        clock_ns = round(1e9 / (sp["tokens_per_s"] * sp["cycles_per_token"]), 6)   # the clock tokens/s assumes
        closes = periods[corner] <= clock_ns
        out.update(clock_ns=clock_ns, closes=closes,
                   tokens_per_s=sp["tokens_per_s"] if closes else 1e9 / (periods[corner] * sp["cycles_per_token"]))
    return out


def speed(stages: dict) -> dict:
    """Our tokens/s (the benchmark's if it ran, else the chip simulation's long run) next to SPEC §8's
    figures, why it beats them, and the same cycles/token at the placed chip's clock."""
    out = {"measured": False, "source": None, "command": None, "run": None, "cycles": None, "cycles_per_token": None,
           "tokens_per_s": None, "vs_k3": None, "seq_len": None, "read_beats": None, "write_beats": None,
           "beats_per_token": None, "k3_tokens_per_s": K3_TOKENS_PER_S,
           "port_limit_tokens_per_s": PORT_LIMIT_TOKENS_PER_S, "read_roofline_tokens_per_s": READ_ROOFLINE_TOKENS_PER_S}
    for source in ("bench", "sim"):
        t = _throughput_run(source, stages[source]["data"])
        if t:
            out.update(measured=True, source=source, command=stages[source]["command"], **t,
                       vs_k3=t["tokens_per_s"] / K3_TOKENS_PER_S)
            if t["read_beats"] is not None and t["write_beats"] is not None and t["seq_len"]:
                out["beats_per_token"] = (t["read_beats"] + t["write_beats"]) / t["seq_len"]
            break
    out["why_faster"] = why_faster(out)
    out["placed"] = placed_clock(stages, out)
    return out


# ---------------------------------------------------------------------------------------------- size, timing
def size(syn: dict | None) -> dict:
    keys = ("top", "logic_mm2", "macro_mm2", "total_mm2", "budget_used", "within_budget", "yosys_chip_area_um2",
            "cells", "sram_bits", "rom_bits", "macro_bits")
    out = {**dict.fromkeys(keys), "budget_mm2": AREA_BUDGET_UM2 / 1e6, "bits_budget": SRAM_BUDGET_BITS}
    if syn is None:
        return out
    a, inst = syn["area"], syn["macros"]["instances"]
    out.update(top=syn["top"], logic_mm2=a["logic_um2"] / 1e6, macro_mm2=a["macro_um2"] / 1e6,
               total_mm2=a["total_um2"] / 1e6, budget_used=a["budget_used"], within_budget=a.get("within_budget"),
               yosys_chip_area_um2=a.get("yosys_chip_area_um2"), cells=syn["cells"]["count"],
               sram_bits=sum(m["bits"] for m in inst if m["type"] == "msh_sram"),
               rom_bits=sum(m["bits"] for m in inst if m["type"] == "msh_rom"), macro_bits=syn["macros"]["bits"])
    return out


def _slack(v: dict | None) -> dict | None:
    if v is None:
        return None
    return {"wns_ns": v["wns_ns"], "tns_ns": v.get("tns_ns"), "min_period_ns": v.get("min_period_ns")}


def placed_corners(stages: dict) -> dict:
    """Per corner, the post-placement STA's numbers: place.json's copy, or, when placement ran without it
    (flow.place --no-sta, as make demo does), flow.sta --place's result; {} when neither ran."""
    place, apart = stages["place"]["data"], stages["place_sta"]["data"]
    return (place or {}).get("sta") or (apart or {}).get("corners") or {}


def timing(stages: dict) -> dict:
    """Worst setup slack per corner before (OpenSTA, wire-load model) and after placement (placed-wire SPEF)."""
    sta, place, orfs = (stages[s]["data"] for s in ("sta", "place", "orfs"))
    pre, post = (sta or {}).get("corners", {}), placed_corners(stages)
    finish = (orfs or {}).get("timing", {}).get("finish") or {}
    corners = dict.fromkeys([*pre, *post])
    return {"period_ns": (sta or place or {}).get("period_ns"),
            "corners": {c: {"pre": _slack(pre.get(c)), "post": _slack(post.get(c))} for c in corners},
            "orfs_finish_setup_ws_ns": finish.get("setup_ws")}


def placement(place: dict | None) -> dict | None:
    if place is None:
        return None
    die = place.get("die", {})
    return {"top": place["top"], "die_mm2": die["area_um2"] / 1e6 if "area_um2" in die else None,
            "utilization": place.get("utilization"), "hpwl_um": place.get("hpwl_um"),
            "cells_placed": place.get("cells_placed"), "macros_placed": place.get("macros_placed")}


def warnings(stages: dict) -> list[str]:
    """Stages that describe different designs (a leftover of another BLOCK) make the headline a mix."""
    tops = {s: v["data"]["top"] for s, v in stages.items() if v["data"] and isinstance(v["data"].get("top"), str)}
    if len(set(tops.values())) > 1:
        return ["the stages describe different designs: " + ", ".join(f"{s} `{t}`" for s, t in tops.items())]
    return []


def summary(stages: dict) -> dict:
    """The headline numbers, None where the stage did not run."""
    return {"correctness": correctness(stages["sim"]["data"]), "speed": speed(stages),
            "size": size(stages["synth"]["data"]), "timing": timing(stages),
            "placement": placement(stages["place"]["data"]), "warnings": warnings(stages)}


# ---------------------------------------------------------------------------------------------- brief
def fmt(v, spec: str = ",.3f", none: str = "—") -> str:
    return none if v is None else format(v, spec)


def passed(c: dict, unit: str) -> str:
    """"3/3 tests" from a simulation summary's counts, "" when it has none."""
    return f"{c['tests'] - (c['failed'] or 0)}/{c['tests']} {unit}" if c["tests"] is not None else ""


def placed_text(p: dict) -> str:
    """One sentence on the speed at the placed chip's clock, or why there is none."""
    if p["status"] == "no placement":
        return (f"no placement result ({p['path']} not found; `{p['command']}` makes it): speed at the placed clock "
                "unknown")
    if p["status"] == "no period":
        return f"the post-placement STA ({p['path']}) has no shortest period at any corner"
    after = "sign-off's repair" if p["path"].endswith("signoff.json") else "placement"
    where = (f"{p['corner']} corner's shortest period after {after} is {p['min_period_ns']:.3f} ns "
             f"({p['mhz']:.1f} MHz)")
    if p["tokens_per_s"] is None:
        return f"not measured yet; the {where}"
    if p["closes"]:
        return f"{p['tokens_per_s']:,.0f} tokens/s holds at the placed clock: the {where}, within {p['clock_ns']:g} ns"
    return (f"{p['tokens_per_s']:,.0f} tokens/s at the placed clock: the {where}, not {p['clock_ns']:g} ns "
            f"(same cycles/token)")


def _slack_line(corners: dict, when: str) -> str:
    return " / ".join(f"{c} {v[when]['wns_ns']:.3f}" for c, v in corners.items()
                      if v[when] and v[when]["wns_ns"] is not None)


def signoff_line(stages: dict) -> str:
    """make demo's sign-off line: the verdict, setup slack per corner and hold after repair, what breaks."""
    so = stages.get("signoff", {"data": None})["data"]
    if so is None:
        return "sign-off   : not run"
    setup = " / ".join(f"{c} {fmt(v['wns_ns'])}" for c, v in so["corners"].items())
    hold = so["corners"].get("fast", {}).get("worst_hold_slack_ns")
    slew = sum(v["max_transition_violations"] or 0 for v in so["corners"].values())
    dr = so["design_rules"]
    return (f"sign-off   : {'SIGNED OFF' if so['signed_off'] else 'not signed off'}; slack {setup} ns after repair, "
            f"hold {fmt(hold)} ns at fast; {slew:,} transition, {dr['max_capacitance_violations']:,} capacitance, "
            f"{dr['max_fanout_violations']:,} fanout violations; cells {so['std_cell_area_um2'] / 1e6:.4f} mm2")


def brief(stages: dict, runtime: dict | None = None, report: Path | None = None) -> str:
    """6-12 lines: the closing summary of ``make demo``; with ``runtime`` (flow/runlog.py's record) each
    step's wall time and the total, with ``report`` where the report is (or that it was not written)."""
    s = summary(stages)
    c, sp, z, t, p = s["correctness"], s["speed"], s["size"], s["timing"], s["placement"]
    if c["level"] == "chip":
        sim = (f"{c['verdict']}, chip `{c['top']}`: bit-exact {c['bit_exact_runs']} runs, min cosine "
               f"{fmt(c['min_cosine'], '.6f')}, argmax {fmt(c['argmax_agreement'], '.4f')}")
    else:
        sim = c["verdict"] + (f", {passed(c, 'tests')} ({c['top']})" if c["level"] else "")
    lines = [f"simulation : {sim}"]
    if sp["measured"]:
        lines += [f"speed      : {fmt(sp['cycles_per_token'], ',.0f')} cycles/token = {sp['tokens_per_s']:,.0f} "
                  f"tokens/s at 100 MHz ({sp['vs_k3']:.2f}x K3's {K3_TOKENS_PER_S:,}; port limit "
                  f"{PORT_LIMIT_TOKENS_PER_S:,}, read roofline {READ_ROOFLINE_TOKENS_PER_S:,})",
                  f"  why      : {sp['why_faster']}",
                  f"  placed   : {placed_text(sp['placed'])}"]
    else:
        lines.append(f"speed      : not measured yet (K3 {K3_TOKENS_PER_S:,} tokens/s; port limit "
                     f"{PORT_LIMIT_TOKENS_PER_S:,})")
    if z["total_mm2"] is None:
        lines.append("synthesis  : not run")
    else:
        lines.append(f"area       : {z['total_mm2']:.4f} mm2 = {z['logic_mm2']:.4f} logic + "
                     f"{z['macro_mm2']:.4f} macros "
                     f"({100 * z['budget_used']:.1f} % of 4 mm2), {z['cells']:,} cells ({z['top']})")
    pre, post = _slack_line(t["corners"], "pre"), _slack_line(t["corners"], "post")
    lines.append(f"timing pre : slack {pre} ns at {t['period_ns']} ns (OpenSTA, wire load)" if pre
                 else "timing     : not run")
    lines.append(f"timing post: slack {post} ns after placement (utilization {fmt(p['utilization'], '.2f')})"
                 if post else "placement  : not run")
    lines.append(signoff_line(stages))
    if t["orfs_finish_setup_ws_ns"] is not None:
        lines.append(f"routed     : ORFS finish setup slack {t['orfs_finish_setup_ws_ns']:.3f} ns")
    lines += [f"warning    : {w}" for w in s["warnings"]]
    if runtime is not None:
        lines.append(f"runtime    : {runtime_text(runtime)}")
    if report is not None:
        lines.append(f"report     : {report}" if report.is_file() else
                     f"report     : not written ({report} not found; `make report` writes it)")
    return "\n".join(lines)
