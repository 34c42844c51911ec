"""Which signals between regions are registered on both sides (issue 17, "registered boundaries").

    python -m flow.boundaries [--place build/place] [--out build/place/boundaries.json]

A net that joins cells of two regions (engines) is *registered* when it leaves a flip-flop (or a macro's
read port, which is clocked) and every pin it reaches in another region is a flip-flop's data pin or a
macro's input, plain buffers and inverters between them being transparent. Otherwise a single-cycle
path crosses from one engine's logic into another's, over the distance between their regions. The
report counts, per pair of regions, the crossing nets and how many are not registered at the source
(``logic_out``) or at a sink (``logic_in``), with examples and the buses they belong to (a net traced back
through buffers to the signal that drives it, its bit index dropped: ``core/vrf_rdata``, or ``rst_n`` for the
reset's buffer tree), and the registers registering every crossing would add: one per region a net enters
logic in, one per net that leaves logic. It reads the placement state of flow.place (flow.place_out);
``make demo`` writes it for the report (``md_boundaries``).
"""
from __future__ import annotations

import argparse
import json
import re
import sys
import time
from collections import Counter, defaultdict
from pathlib import Path

from flow.place_out import STATE_FILE, load_state
from flow.place_netlist import Design, PlaceError

FLOP = re.compile(r"^S?DFF")
TRANSPARENT = re.compile(r"^(CLK)?BUF_X\d+$|^INV_X\d+$")
CLOCK_PINS = frozenset({"CK"})
EXAMPLES = 5
BUSES = 6                       # per pair of regions, the buses with the most unregistered nets
BIT = re.compile(r"\[\d+\]$")


def _graph(d: Design):
    """Per component its output nets and (net, pin) inputs; per net its driver and sinks."""
    driver, sinks, outs = {}, defaultdict(list), defaultdict(list)
    for k, pins in enumerate(d.net_pins):
        for p in pins:
            if p[0] < 0:
                continue
            if p[5]:
                driver[k] = p[0]
                outs[p[0]].append(k)
            else:
                sinks[k].append((p[0], p[1]))
    return driver, sinks, outs


def _is_macro(d: Design, i: int) -> bool:
    return i >= d.n_std


def classify(d: Design) -> dict:
    driver, sinks, outs = _graph(d)
    inputs = defaultdict(list)
    for k, ss in sinks.items():
        for i, pin in ss:
            inputs[i].append(k)

    def registered_source(net: int) -> bool:
        seen = 0
        while net in driver and seen < 64:
            i = driver[net]
            if _is_macro(d, i) or FLOP.match(d.comp_master[i]):
                return True
            if not TRANSPARENT.match(d.comp_master[i]) or not inputs[i]:
                return False
            net, seen = inputs[i][0], seen + 1
        return False

    def bus(net: int) -> str:
        """The signal driving ``net`` through buffers and inverters, without its bit index."""
        for _ in range(64):
            i = driver.get(net)
            if i is None or not TRANSPARENT.match(d.comp_master[i]) or not inputs[i]:
                break
            net = inputs[i][0]
        return BIT.sub("", d.net_name[net])

    def registered_sinks(net: int, region: str) -> bool:
        stack, seen = [net], 0
        while stack and seen < 4096:
            n = stack.pop()
            seen += 1
            for i, pin in sinks.get(n, []):
                if pin in CLOCK_PINS or d.comp_group[i] == region:
                    continue
                if _is_macro(d, i) or FLOP.match(d.comp_master[i]):
                    continue
                if TRANSPARENT.match(d.comp_master[i]):
                    stack += outs[i]
                    continue
                return False
        return True

    pairs: dict[tuple[str, str], dict] = {}
    buses: dict[tuple[str, str], Counter] = defaultdict(Counter)
    leave_logic = set()
    for k in range(len(d.net_pins)):
        if k not in driver:
            continue
        src = d.comp_group[driver[k]]
        others = {d.comp_group[i] for i, pin in sinks.get(k, []) if pin not in CLOCK_PINS} - {src}
        if TRANSPARENT.match(d.comp_master[driver[k]]) and not others:
            continue
        for dst in others:
            e = pairs.setdefault((src, dst), {"from": src, "to": dst, "nets": 0, "logic_out": 0, "logic_in": 0,
                                              "unregistered": 0, "examples": []})
            e["nets"] += 1
            out_ok, in_ok = registered_source(k), registered_sinks(k, src)
            e["logic_out"] += not out_ok
            e["logic_in"] += not in_ok
            if not out_ok:
                leave_logic.add(k)
            if not (out_ok and in_ok):
                e["unregistered"] += 1
                buses[src, dst][bus(k)] += 1
                if len(e["examples"]) < EXAMPLES:
                    e["examples"].append(d.net_name[k])
    for key, e in pairs.items():
        e["buses"] = [[name, n] for name, n in buses[key].most_common(BUSES)]
    rows = sorted(pairs.values(), key=lambda e: -(e["logic_out"] + e["logic_in"]))
    logic_in = sum(e["logic_in"] for e in rows)
    return {"pairs": rows, "crossing_nets": sum(e["nets"] for e in rows),
            "unregistered": sum(e["unregistered"] for e in rows),
            "logic_out": sum(e["logic_out"] for e in rows), "logic_in": logic_in,
            "registers_to_add": logic_in + len(leave_logic)}


COMMAND = "python -m flow.boundaries --place {place}"
ROWS = 12                       # pairs of regions in the report's table


def md_boundaries(r: dict | None, command: str) -> list[str]:
    """The report's section: totals, then the pairs of regions with the most unregistered nets and their buses."""
    md = ["### Registered boundaries", ""]
    if r is None:
        return md + [f"Not measured: `{command}` writes it from the placement.", ""]
    md += [f"{r['crossing_nets']:,} nets cross between regions; {r['unregistered']:,} are not registered on both "
           f"sides ({r['logic_out']:,} leave logic, {r['logic_in']:,} enter logic in another region). Registering "
           f"every one would add {r['registers_to_add']:,} flip-flops, and a cycle wherever an op's data crosses "
           f"(issue 17 point 3, not done). `{r.get('command', command)}`", "",
           "| from | to | nets | not registered | leave logic | enter logic | largest buses (unregistered nets) |",
           "|---|---|---:|---:|---:|---:|---|"]
    for e in r["pairs"][:ROWS]:
        buses = ", ".join(f"`{name}` {n:,}" for name, n in e.get("buses", []))
        md.append(f"| {e['from']} | {e['to']} | {e['nets']:,} | {e['unregistered']:,} | {e['logic_out']:,} | "
                  f"{e['logic_in']:,} | {buses} |")
    rest = r["pairs"][ROWS:]
    if rest:
        md.append(f"| {len(rest)} more pairs | | {sum(e['nets'] for e in rest):,} | "
                  f"{sum(e['unregistered'] for e in rest):,} | | | |")
    return md + [""]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m flow.boundaries", description=__doc__.split("\n\n")[0])
    ap.add_argument("--place", type=Path, default=Path("build/place"))
    ap.add_argument("--out", type=Path, default=None, help="JSON report (default: <place>/boundaries.json)")
    args = ap.parse_args(argv)
    t0 = time.monotonic()
    try:
        state = load_state(args.place / STATE_FILE)
    except PlaceError as e:
        print(f"flow.boundaries: error: {e}", file=sys.stderr)
        return 1
    r = classify(state["design"])
    r.update(command=COMMAND.format(place=args.place), runtime_s=round(time.monotonic() - t0, 1),
             finished_unix=round(time.time(), 1))
    out = args.out or args.place / "boundaries.json"
    tmp = out.with_name(out.name + ".tmp")
    tmp.write_text(json.dumps(r, indent=1) + "\n")
    tmp.replace(out)
    print(f"{r['crossing_nets']:,} nets cross between regions, {r['unregistered']:,} not registered on both sides: "
          f"{r['logic_out']:,} leave logic, {r['logic_in']:,} enter logic; {r['registers_to_add']:,} registers "
          f"would register them all")
    for e in r["pairs"][:20]:
        print(f"  {e['from']:>24} -> {e['to']:<24} {e['nets']:>7,} nets  {e['logic_out']:>6,} from logic  "
              f"{e['logic_in']:>6,} into logic  " + ", ".join(f"{b} {n:,}" for b, n in e["buses"][:3]))
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
