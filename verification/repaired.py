"""The signed-off netlist against the synthesised one: the same logic, up to buffers and cell sizes.

    python -m verification.repaired --synth build/synth --signoff build/signoff [--out build/signoff/repaired.json]

Placement and sign-off change the netlist ``make synth`` wrote (the one ``make replay`` and ``make equiv`` check
against the RTL) in two ways only: they resize cells (``NAND2_X1`` -> ``NAND2_X4``: the same function) and they
insert or remove buffers (electrical repair, load isolation, hold). So the signed-off netlist computes what the
synthesised one computes if, once every buffer is looked through, each cell of one is a cell of the same name and
function in the other, each of its inputs is driven by the same cell output (or chip input, or constant), and
each chip output by the same source. This check reads both netlists whole (the synthesis' ``<top>.sta.il``
flattened as placement flattens it; the sign-off's flat Verilog), and compares exactly that, cell by cell:
a buffer on the wrong net, a lost or extra cell, a cell turned into another function, a swapped pin are each
named. Two cells have the same function when their names differ only in the drive strength (``_X<n>``);
buffers are the ``BUF`` and ``CLKBUF`` cells of the library (input ``A``, output ``Z``).
"""
from __future__ import annotations

import argparse
import json
import re
import sys
import time
from pathlib import Path

from flow.place_netlist import flatten, inst_path, lef_directions
from flow.rtlil_flat import macro_directions

BUFFERS = ("BUF", "CLKBUF")
SHOW = 10
_DRIVE = re.compile(r"_X\d+$")
_SIGNAL = re.compile(r"\\(\S+)\s|(1'b[01xz])|([A-Za-z_][\w$]*(?:\[\d+\])?)")
_CELL = re.compile(r"^\s+([A-Za-z_][\w$]*)\s+(\\\S+\s|[A-Za-z_][\w$]*)\s*\((.*)\);\s*$")
_DECL = re.compile(r"^\s+(input|output|wire)\s+(?:\[(\d+):(\d+)\]\s+)?(\\\S+\s|[A-Za-z_][\w$]*)\s*;")
_ASSIGN = re.compile(r"^\s+assign\s+(.*?)\s*=\s*(.*?)\s*;\s*$")


class RepairedError(RuntimeError):
    """A netlist cannot be read, or the two differ; the message names the first differences."""


def family(cell_type: str) -> str:
    """The cell's function: its name without the drive strength."""
    return _DRIVE.sub("", cell_type)


class Netlist:
    """A flat netlist: cells (name -> type, pin -> net per bit), pin directions per type, chip ports."""

    def __init__(self, cells: dict[str, tuple[str, dict[str, list]]], directions, ports: dict[str, tuple[str, list]]):
        self.cells, self.directions, self.ports = cells, directions, ports
        self.driver: dict = {}
        for name, (ctype, conns) in cells.items():
            for pin, nets in conns.items():
                if directions(ctype).get(pin) == "output":
                    for j, n in enumerate(nets):
                        self.driver[n] = (name, pin, j)
        for pname, (direction, nets) in ports.items():
            if direction == "input":
                for j, n in enumerate(nets):
                    self.driver.setdefault(n, ("<input>", pname, j))

    def source(self, net):
        """What drives ``net`` once buffers are looked through: (cell, pin, bit), ("<input>", port, bit), a
        constant, or ("<undriven>",)."""
        seen = 0
        while True:
            if isinstance(net, str) and net.startswith("const:"):
                return ("<const>", net[6:])
            d = self.driver.get(net)
            if d is None:
                return ("<undriven>",)
            ctype = self.cells[d[0]][0] if d[0] in self.cells else ""
            if family(ctype) not in BUFFERS:
                return d
            net = self.cells[d[0]][1]["A"][0]
            seen += 1
            if seen > 10_000:
                raise RepairedError(f"a loop of buffers through {d[0]}")

    def logic(self) -> dict[str, tuple]:
        """Every cell but the buffers: name -> (function, ((input pin, sources), ...))."""
        out = {}
        for name, (ctype, conns) in self.cells.items():
            if family(ctype) in BUFFERS or not conns:          # (a filler or tap cell has no signal pins)
                continue
            dirs = self.directions(ctype)
            ins = tuple((pin, tuple(self.source(n) for n in nets)) for pin, nets in sorted(conns.items())
                        if dirs.get(pin) != "output")
            out[name] = (family(ctype), ins)
        return out

    def outputs(self) -> dict[str, tuple]:
        return {p: tuple(self.source(n) for n in nets) for p, (d, nets) in self.ports.items() if d == "output"}


def synthesised(synth_dir: Path, lef) -> Netlist:
    """``make synth``'s STA netlist, flat (flow.place_netlist.flatten), cells named as OpenSTA names them."""
    s = json.loads((synth_dir / "synth.json").read_text())
    files = s["files"]
    module = flatten(synth_dir / files["sta_rtlil"], synth_dir / files["macro_modules"], s["top"], lef)
    const = lambda b: b if isinstance(b, int) else f"const:{b}"           # noqa: E731
    cells = {inst_path(k, c.get("attributes", {})): (c["type"], {p: [const(b) for b in bits]
                                                                 for p, bits in c["connections"].items()})
             for k, c in module["cells"].items() if not c["type"].startswith("$")}
    dirs = {c["type"]: c["port_directions"] for c in module["cells"].values()}
    ports = {p: (v["direction"], [const(b) for b in v["bits"]]) for p, v in module["ports"].items()}
    return Netlist(cells, lambda t: dirs.get(t, {}), ports)


def _signals(expr: str) -> list[str]:
    """The bits of a connection (a name, a port bit, a constant, or ``{a, b, ...}`` most significant first),
    least significant first."""
    bits = []
    for m in _SIGNAL.finditer(expr):
        esc, const, plain = m.groups()
        bits.append("\\" + esc if esc else f"const:{const[-1]}" if const else plain)
    return bits[::-1]


def signed_off(netlist_v: Path, lef) -> Netlist:
    """The sign-off's flat Verilog (flow.repair.write_verilog): one module, one cell per line, ports, assigns."""
    text = Path(netlist_v).read_text()
    head = text.find("endmodule")
    if head < 0:
        raise RepairedError(f"{netlist_v}: no endmodule")
    macros = macro_directions(text[head:])
    cells, ports, alias = {}, {}, {}
    for line in text[:head].splitlines():
        if m := _CELL.match(line):
            ctype, name, body = m[1], m[2].strip().lstrip("\\"), m[3]
            if ctype in ("module", "assign", "input", "output", "wire"):
                continue
            conns = {}
            for pm in re.finditer(r"\.(\w+)\((.*?)\)(?=\s*(?:,\s*\.|$))", body):
                conns[pm[1]] = _signals(pm[2])
            cells[name] = (ctype, conns)
        elif m := _DECL.match(line):
            kind, msb, lsb, name = m[1], m[2], m[3], m[4].strip().lstrip("\\")
            if kind != "wire":
                width = int(msb) - int(lsb) + 1 if msb else 1
                ports[name] = (kind, [name] if width == 1 else [f"{name}[{j}]" for j in range(width)])
        elif m := _ASSIGN.match(line):
            lhs, rhs = _signals(m[1]), _signals(m[2])
            alias.update(zip(lhs, rhs))
    for name, (kind, nets) in ports.items():          # an assigned output port bit is its right-hand side
        if kind == "output":
            ports[name] = (kind, [alias.get(n, n) for n in nets])

    def directions(ctype: str) -> dict[str, str]:
        found = macros.get(ctype) or lef_directions(lef, ctype)
        if found is None:
            raise RepairedError(f"{netlist_v} instantiates {ctype}, which no LEF defines")
        return found
    return Netlist(cells, directions, ports)


def compare(gold: Netlist, new: Netlist) -> dict:
    """The record of the comparison; RepairedError naming the first differences if the logic is not the same."""
    a, b = gold.logic(), new.logic()
    missing, extra = sorted(set(a) - set(b)), sorted(set(b) - set(a))
    changed = [n for n in a if n in b and a[n] != b[n]]
    outs_a, outs_b = gold.outputs(), new.outputs()
    bad_outs = sorted(p for p in outs_a if outs_a[p] != outs_b.get(p))
    if missing or extra or changed or bad_outs:
        detail = [f"{len(missing)} cells only in the synthesised netlist {missing[:SHOW]}" if missing else "",
                  f"{len(extra)} cells only in the signed-off one {extra[:SHOW]}" if extra else "",
                  f"{len(changed)} cells with another function or other inputs, first "
                  f"{changed[0]}: {a[changed[0]]} vs {b[changed[0]]}" if changed else "",
                  f"outputs driven otherwise: {bad_outs[:SHOW]}" if bad_outs else ""]
        raise RepairedError("the signed-off netlist is not the synthesised one up to buffers and sizes: "
                            + "; ".join(d for d in detail if d))
    resized = sum(gold.cells[n][0] != new.cells[n][0] for n in a)
    buffers = [sum(family(t) in BUFFERS for t, _ in net.cells.values()) for net in (gold, new)]
    return {"equal": True, "cells_compared": len(a), "resized": resized, "buffers_synthesised": buffers[0],
            "buffers_signed_off": buffers[1], "outputs_compared": len(outs_a)}


def main(argv: list[str] | None = None) -> int:
    from flow.place_out import read_lefs
    from pdk_config import PdkError, find_pdk
    ap = argparse.ArgumentParser(prog="python -m verification.repaired", description=__doc__.split("\n\n")[0])
    ap.add_argument("--synth", type=Path, required=True, help="flow.synth folder (synth.json, <top>.sta.il)")
    ap.add_argument("--signoff", type=Path, required=True, help="flow.signoff folder (signoff.json, its netlist)")
    ap.add_argument("--out", type=Path, help="the record (default: <signoff>/repaired.json)")
    args = ap.parse_args(argv)
    out = args.out or args.signoff / "repaired.json"
    out.unlink(missing_ok=True)                                 # a failed run leaves no earlier verdict behind
    t0 = time.monotonic()
    try:
        so = json.loads((args.signoff / "signoff.json").read_text())
        lef = read_lefs(find_pdk())
        print("[repaired] reading the synthesised netlist ...", flush=True)
        gold = synthesised(args.synth, lef)
        print(f"[repaired] {len(gold.cells):,} cells; reading the signed-off netlist ...", flush=True)
        new = signed_off(args.signoff / so["files"]["netlist"], lef)
        print(f"[repaired] {len(new.cells):,} cells; comparing ...", flush=True)
        rec = compare(gold, new)
    except (OSError, KeyError, PdkError, RepairedError) as e:
        print(f"verification.repaired: error: {e}", file=sys.stderr)
        return 1
    rec.update({"synth": str(args.synth), "signoff": str(args.signoff), "runtime_s": round(time.monotonic() - t0, 1),
                "command": "python -m verification.repaired " + " ".join(sys.argv[1:] if argv is None else argv)})
    out.write_text(json.dumps(rec, indent=1) + "\n")
    print(f"[repaired] equal up to buffers and sizes: {rec['cells_compared']:,} cells ({rec['resized']:,} resized), "
          f"{rec['outputs_compared']} outputs; buffers {rec['buffers_synthesised']:,} -> {rec['buffers_signed_off']:,}"
          f"; {rec['runtime_s']:.0f} s; wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
