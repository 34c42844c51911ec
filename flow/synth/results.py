"""synth.json and synth.txt: area, cells, macros and the hierarchy breakdown from the merged parts."""
from __future__ import annotations

import importlib.metadata
import json
import re
import shutil
import sys
import time
from pathlib import Path

from flow.synth.inputs import RtlInput, abc_period_ps, liberty_areas
from flow.synth.spec import AREA_BUDGET_UM2, CORNER, SRAM_BUDGET_BITS, UM2_PER_MIBIT, SynthError
from pdk_config.nangate45 import DONT_USE

RESULT_SCHEMA = "nano-k3/synth/4"      # the layout of synth.json: change it when that changes


def _macro_module(mtype: str, depth: int, width: int) -> str:
    addrw = max(1, (depth - 1).bit_length())
    if mtype == "msh_sram":
        ports = (f"input clk, input we, input [{addrw - 1}:0] waddr, input [{width - 1}:0] wdata, "
                 f"input [{width // 8 - 1}:0] wstrb, input re, input [{addrw - 1}:0] raddr, "
                 f"output [{width - 1}:0] rdata")
    else:
        ports = (f"input [{addrw - 1}:0] raddr1, output [{width - 1}:0] rdata1, "
                 f"input [{addrw - 1}:0] raddr2, output [{width - 1}:0] rdata2")
    return f"module {mtype}_{depth}x{width} ({ports});\nendmodule\n"



def merge_parts(stage: Path, top: str, parts: list, entries: list[Path]) -> dict[str, float | None]:
    """One netlist, STA netlist (and its macros' empty modules alone), summary, stat and log from the parts'
    folders ``entries``; returns Yosys' "Chip area" of each part's top (one instance of it, the other parts'
    tops counted as 0)."""
    summary: dict = {}
    variants: set[tuple[str, int, int]] = set()
    chip_areas: dict[str, float | None] = {}
    with open(stage / f"{top}.v", "w") as net, open(stage / f"{top}.sta.v", "w") as sta, \
            open(stage / f"{top}.sta.il", "w") as il, open(stage / "stat.txt", "w") as stat, \
            open(stage / "yosys.log", "w") as log:
        for part, d in zip(parts, entries):
            for f, name in ((net, "netlist.v"), (sta, "sta.v"), (il, "sta.il"), (log, "yosys.log")):
                with open(d / name) as src:
                    shutil.copyfileobj(src, f)
            stat_txt = (d / "stat.txt").read_text()
            stat.write(f"=== part {part.top} ===\n{stat_txt}")
            chip_areas[part.top] = _chip_area(stat_txt, part.top)
            summary.update(json.loads((d / "design.json").read_text()))
            variants |= {tuple(v) for v in json.loads((d / "macro_types.json").read_text())}
        macro_modules = "\n// Macros as empty modules (cut at their pins); see flow/synth/results.py\n" + \
            "".join(_macro_module(*v) for v in sorted(variants))
        sta.write(macro_modules)
    (stage / f"{top}.macros.v").write_text(macro_modules)      # on their own for flow/place.py
    (stage / "design.json").write_text(json.dumps(summary, indent=1))
    return chip_areas


def _bits(macro: dict, where: str) -> tuple[int, int]:
    p = macro["params"]
    if "DEPTH" not in p or "WIDTH" not in p:
        raise SynthError(f"{macro['type']} instance {where} does not set DEPTH and WIDTH (SPEC section 5): {p}")
    return p["DEPTH"], p["WIDTH"]


def _walk(summary: dict, areas: dict[str, float], top: str):
    """Per module own area/cells and the instance tree with area including submodules."""
    own = {m: {"area_um2": sum(areas.get(c, 0.0) * n for c, n in s["cells"].items()),
               "cells": sum(s["cells"].values())} for m, s in summary.items()}
    unknown = sorted({c for s in summary.values() for c in s["cells"] if c not in areas})
    if unknown:
        raise SynthError(f"cells without a liberty area: {unknown}")
    memo: dict[str, tuple[float, int]] = {}

    def total(m: str) -> tuple[float, int]:
        if m not in memo:
            a, c = own[m]["area_um2"], own[m]["cells"]
            for sub in summary[m]["submodules"]:
                sa, sc = total(sub["module"])
                a, c = a + sa, c + sc
            memo[m] = (a, c)
        return memo[m]

    instances, macros, counts = [], [], {m: 0 for m in summary}

    def visit(m: str, path: str, depth: int) -> None:
        counts[m] += 1
        a, c = total(m)
        instances.append({"path": path, "module": m, "depth": depth, "area_um2": round(a, 3), "cells": c})
        for mac in summary[m]["macros"]:
            where = f"{path}.{mac['instance']}"
            depth_, width = _bits(mac, where)
            bits = depth_ * width
            macros.append({"path": where, "type": mac["type"], "depth": depth_, "width": width, "bits": bits,
                           "area_um2": round(bits / 2**20 * UM2_PER_MIBIT, 3),
                           **({"init_file": mac["params"]["INIT_FILE"]} if "INIT_FILE" in mac["params"] else {})})
        for sub in summary[m]["submodules"]:
            visit(sub["module"], f"{path}.{sub['instance']}", depth + 1)

    visit(top, top, 0)
    modules = {m: {"instances": counts[m], "own_area_um2": round(own[m]["area_um2"], 3),
                   "own_cells": own[m]["cells"], "area_per_instance_um2": round(total(m)[0], 3),
                   "cells_per_instance": total(m)[1]}
               for m in summary if counts[m]}
    return modules, instances, macros


def _chip_area(stat_txt: str, top: str) -> float | None:
    """The "Chip area" line of `stat -liberty`: the hierarchy total when there is one, else the module's."""
    for kind in ("top module", "module"):
        m = re.search(f"Chip area for {kind} '\\\\?{re.escape(top)}':" + r"\s*([0-9.]+)", stat_txt)
        if m:
            return float(m.group(1))
    return None


def _versions() -> dict:
    v = {"python": sys.version.split()[0]}
    for dist in ("pyosys",):
        try:
            v[dist] = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            v[dist] = None
    return v


def build_result(rtl: RtlInput, stage: Path, liberty: Path, pdk, flatten: bool, full_adders: bool,
                 runtime_s: float, part_chip_areas: dict[str, float | None]) -> dict:
    """synth.json's content; Yosys' own "Chip area" is each part's, times the instances of its top."""
    summary = json.loads((stage / "design.json").read_text())
    areas = liberty_areas(liberty)
    modules, instances, macros = _walk(summary, areas, rtl.top)
    chip_area = (None if None in part_chip_areas.values()
                 else sum(a * modules[t]["instances"] for t, a in part_chip_areas.items()))
    log = (stage / "yosys.log").read_text(errors="replace")
    yosys_version = next((ln.strip() for ln in log.splitlines() if ln.strip().startswith("Yosys 0")), None)
    abc_delays = [float(x) for x in re.findall(r"ABC: WireLoad.*Delay =\s*([0-9.]+) ps", log)]
    cell_types: dict[str, int] = {}
    for inst in instances:
        for c, n in summary[inst["module"]]["cells"].items():
            cell_types[c] = cell_types.get(c, 0) + n
    logic_area = sum(areas[c] * n for c, n in cell_types.items())
    seq_area = sum(areas[c] * n for c, n in cell_types.items() if re.match(r"(S?DFF|DLH|DLL)", c))
    macro_bits = sum(m["bits"] for m in macros)
    macro_area = sum(m["area_um2"] for m in macros)
    total = logic_area + macro_area
    # The engines: the children of the top, or of the one instance that wraps them all (msh_chip_top.core).
    parent, depth = instances[0], 1
    while len(kids := [i for i in instances if i["depth"] == depth and i["path"].startswith(parent["path"] + ".")]) == 1:
        parent, depth = kids[0], depth + 1
    engines = [{"name": i["path"].split(".", 1)[1], "module": i["module"], "area_um2": i["area_um2"],
                "cells": i["cells"]} for i in kids]
    glue = modules[parent["module"]]
    engines.append({"name": "(top-level logic)" if depth == 1 else f"({parent['path'].split('.', 1)[1]} own logic)",
                    "module": parent["module"], "area_um2": glue["own_area_um2"], "cells": glue["own_cells"]})
    engines.sort(key=lambda e: -e["area_um2"])
    return {
        "schema": RESULT_SCHEMA,
        "top": rtl.top,
        "rtl": {"dir": str(rtl.rtl_dir), "config_sha256": rtl.config_sha256, "filelist": str(rtl.filelist),
                "files": [str(f) for f in rtl.files], "config": rtl.config},
        "pdk": {"root": str(pdk.root), "found_by": pdk.found_by, "corner": CORNER, "liberty": str(liberty),
                "dont_use": list(DONT_USE)},
        "options": {"flatten": flatten, "full_adders": full_adders, "abc_delay_target_ps": abc_period_ps(rtl),
                    "hierarchy": "flat" if flatten
                    else "hierarchical: each module mapped on its own; breakdown by module and instance path"},
        "area": {
            "logic_um2": round(logic_area, 3),
            "sequential_um2": round(seq_area, 3),
            "yosys_chip_area_um2": None if chip_area is None else round(chip_area, 6),
            "macro_um2": round(macro_area, 3),
            "total_um2": round(total, 3),
            "budget_um2": AREA_BUDGET_UM2,
            "budget_used": round(total / AREA_BUDGET_UM2, 6),
            "within_budget": total <= AREA_BUDGET_UM2,
        },
        "abc": {"delay_ps": max(abc_delays, default=None), "delay_ps_per_run": abc_delays,
                "note": "ABC's own pre-layout estimate (stime -p, no wire load), one run per module"},
        "cells": {"count": sum(cell_types.values()), "by_type": dict(sorted(cell_types.items()))},
        "macros": {"count": len(macros), "bits": macro_bits, "area_um2": round(macro_area, 3),
                   "budget_bits": SRAM_BUDGET_BITS, "within_budget": macro_bits <= SRAM_BUDGET_BITS,
                   "price": "bits / 2^20 x 1e6 um^2 (SPEC section 5)", "instances": macros},
        "hierarchy": {"engines": engines, "modules": modules, "instances": instances},
        "runtime_s": round(runtime_s, 2),
        "finished_unix": round(time.time(), 1),      # with runtime_s: when it ran (flow/report.py's flow runtime)
        "versions": {**_versions(), "yosys": yosys_version, "abc": "yosys-abc bundled with pyosys"},
        "files": {"netlist": f"{rtl.top}.v", "sta_netlist": f"{rtl.top}.sta.v",
                  "sta_rtlil": f"{rtl.top}.sta.il", "macro_modules": f"{rtl.top}.macros.v", "log": "yosys.log",
                  "stat": "stat.txt", "summary": "synth.txt"},
        "metrics": {
            "synth__design__instance__area__stdcell": round(logic_area, 3),
            "synth__design__instance__area__macros": round(macro_area, 3),
            "synth__design__instance__area": round(total, 3),
            "synth__design__instance__count__stdcell": sum(cell_types.values()),
            "synth__design__instance__count__macros": len(macros),
            "synth__design__memory__bits": macro_bits,
        },
    }


def summary_text(r: dict) -> str:
    a, c, m = r["area"], r["cells"], r["macros"]
    lines = [
        f"synthesis of {r['top']} on Nangate45 ({r['pdk']['corner']}), {r['options']['hierarchy']}",
        f"  logic area     {a['logic_um2']:>14,.1f} um2   (Yosys 'Chip area': {a['yosys_chip_area_um2']})",
        f"  macro area     {a['macro_um2']:>14,.1f} um2   ({m['count']} macros, {m['bits']:,} bits, {m['price']})",
        f"  total area     {a['total_um2']:>14,.1f} um2   = {100 * a['budget_used']:.2f} % of the "
        f"{a['budget_um2'] / 1e6:.1f} mm2 budget ({'within' if a['within_budget'] else 'OVER'})",
        f"  cells          {c['count']:>14,}",
        f"  ABC delay      {r['abc']['delay_ps']!s:>14} ps  (ABC's pre-layout estimate, worst module)",
        f"  runtime        {r['runtime_s']:>14.1f} s   ({len(r['parts'])} part(s), "
        f"{sum(p['reused'] for p in r['parts'])} reused from the cache, {r['options']['jobs']} Yosys process(es) "
        "at a time)",
        "", "by engine (top-level instances):",
    ]
    lines += [f"  {e['name']:<32} {e['module']:<28} {e['area_um2']:>12,.1f} um2 {e['cells']:>9,} cells"
              for e in r["hierarchy"]["engines"]]
    lines += ["", "macros:"] + [f"  {x['path']:<40} {x['type']:<9} {x['depth']:>6} x {x['width']:<4} "
                                f"{x['bits']:>10,} bits {x['area_um2']:>12,.1f} um2" for x in m["instances"]]
    top_types = sorted(c["by_type"].items(), key=lambda kv: -kv[1])[:15]
    lines += ["", "most used cells:"] + [f"  {t:<14} {n:>9,}" for t, n in top_types]
    return "\n".join(lines) + "\n"
