"""The synthesised STA netlist (``<top>.sta.il``), read and flattened in Python, as Yosys' ``flatten`` and
``write_json`` would give it.

flow.synth writes the gate netlist as RTLIL: every part's modules, each instance of a module a cell whose type
names it, leaf cells of the liberty and the macros' empty modules (``<top>.macros.v``). Placement wants it flat:
one module whose cells are the leaf cells, named by their instance path (``core.mac._123_``, with the
``hdlname`` attribute ``core mac _123_`` that flow.place_netlist turns into OpenSTA's ``core/mac/_123_``), and
nets as bit numbers shared by every pin they join, with each hierarchy level's wire names for them. Yosys did
this in a child process (read, flatten, 1.1 GB of JSON written and read back: about four minutes on the nano
chip); this reader does it in one pass over the text.

The returned dict has the layout of one module of Yosys' JSON (``ports``, ``cells`` with ``type``,
``port_directions``, ``connections`` and ``attributes``, ``netnames`` with ``bits``), which the placement
code reads. Bits are numbered from 2 (Yosys' convention); constants are the strings ``"0"``, ``"1"``,
``"x"``, ``"z"``. What the gate netlists of flow.synth do not hold (wire offsets, ``upto`` ranges, processes,
memories) stops the reader with the line it met.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

MACRO_PORT = re.compile(r"\b(input|output)\s*(?:\[(\d+):(\d+)\])?\s*([A-Za-z_]\w*)")


class RtlilError(ValueError):
    """The RTLIL text has something this reader does not take; the message names the file and line."""


@dataclass
class _Wire:
    width: int
    direction: str | None          # "input" / "output" / "inout" for a port
    port_id: int = 0


@dataclass
class _Module:
    name: str
    wires: dict[str, _Wire] = field(default_factory=dict)
    cells: list[tuple[str, str, dict[str, list[str]]]] = field(default_factory=list)  # (type, name, pin -> sigspec)
    connects: list[tuple[list[str], list[str]]] = field(default_factory=list)


def _strip(name: str) -> str:
    """RTLIL's public ``\\name`` as Yosys' JSON writes it (``name``); private ``$name`` stays."""
    return name[1:] if name.startswith("\\") else name


def read_rtlil(path: Path) -> dict[str, _Module]:
    """The modules of a gate-level RTLIL file: wires (width, port direction), cells (type, name, connections)
    and module-level connections, names as in the JSON (without the leading backslash)."""
    modules: dict[str, _Module] = {}
    mod: _Module | None = None
    conns: dict[str, list[str]] | None = None
    with open(path) as f:
        for lineno, line in enumerate(f, 1):
            tok = line.split()
            if not tok:
                continue
            kw = tok[0]
            if kw == "connect":
                if conns is not None:
                    conns[_strip(tok[1])] = tok[2:]
                elif mod is not None:
                    lhs, rhs = _split_pair(tok[1:], path, lineno)
                    mod.connects.append((lhs, rhs))
                else:
                    raise RtlilError(f"{path}:{lineno}: `connect` outside a module")
            elif kw == "wire":
                if mod is None:
                    raise RtlilError(f"{path}:{lineno}: `wire` outside a module")
                mod.wires[_strip(tok[-1])] = _wire(tok[1:-1], path, lineno)
            elif kw == "cell":
                if mod is None:
                    raise RtlilError(f"{path}:{lineno}: `cell` outside a module")
                conns = {}
                mod.cells.append((_strip(tok[1]), _strip(tok[2]), conns))
            elif kw == "end":
                if conns is not None:
                    conns = None
                elif mod is not None:
                    mod = None
                else:
                    raise RtlilError(f"{path}:{lineno}: `end` without a module or cell")
            elif kw == "module":
                mod = modules[_strip(tok[1])] = _Module(_strip(tok[1]))
            elif kw in ("attribute", "parameter", "autoidx") or kw.startswith("#"):
                continue
            else:
                raise RtlilError(f"{path}:{lineno}: `{kw}` is not part of a gate netlist (expected module, wire, "
                                 "cell, connect, end)")
    return modules


def _wire(opts: list[str], path: Path, lineno: int) -> _Wire:
    w = _Wire(1, None)
    i = 0
    while i < len(opts):
        o = opts[i]
        if o == "width":
            w.width = int(opts[i + 1])
            i += 2
        elif o in ("input", "output", "inout"):
            w.direction, w.port_id = o, int(opts[i + 1])
            i += 2
        elif o == "signed":
            i += 1
        else:
            raise RtlilError(f"{path}:{lineno}: wire option `{o}` is not supported (only width, input, output, "
                             "inout and signed: flow.synth writes no offsets or upto ranges)")
    return w


def _split_pair(tok: list[str], path: Path, lineno: int) -> tuple[list[str], list[str]]:
    """A module-level ``connect <lhs> <rhs>``: the two sigspecs' tokens."""
    depth, cut = 0, None
    for i, t in enumerate(tok):
        depth += t == "{"
        depth -= t == "}"
        nxt = tok[i + 1] if i + 1 < len(tok) else ""
        if depth == 0 and not nxt.startswith("["):
            cut = i + 1
            break
    if cut is None or cut >= len(tok):
        raise RtlilError(f"{path}:{lineno}: cannot split `connect {' '.join(tok)}` into two signals")
    return tok[:cut], tok[cut:]


def _bits(tok: list[str], wire_bits: Callable[[str], list], where: str) -> list:
    """A sigspec's tokens as bits, least significant first (RTLIL writes the chunks of a concatenation and the
    digits of a constant most significant first)."""
    chunks: list[list] = []
    i = 0
    while i < len(tok):
        t = tok[i]
        i += 1
        if t in ("{", "}"):
            continue
        if "'" in t and not t.startswith(("\\", "$")):
            width, digits = t.split("'", 1)
            if len(digits) != int(width):
                raise RtlilError(f"{where}: constant {t} is not written bit by bit")
            chunks.append([d for d in reversed(digits)])
            continue
        bits = wire_bits(_strip(t))
        if i < len(tok) and tok[i].startswith("["):
            sel = tok[i][1:-1]
            i += 1
            hi, _, lo = sel.partition(":")
            lo = lo or hi
            bits = bits[int(lo):int(hi) + 1]
        chunks.append(bits)
    out: list = []
    for c in reversed(chunks):
        out.extend(c)
    return out


def macro_directions(macros_v: str) -> dict[str, dict[str, str]]:
    """Port directions of the macros' empty modules (flow.synth.results ``_macro_module``)."""
    out: dict[str, dict[str, str]] = {}
    for m in re.finditer(r"module\s+(\w+)\s*\((.*?)\);", macros_v, re.S):
        out[m.group(1)] = {p.group(4): p.group(1) for p in MACRO_PORT.finditer(m.group(2))}
    return out


class _Flattener:
    def __init__(self, modules: dict[str, _Module], directions: Callable[[str], dict[str, str]]):
        self.modules = modules
        self.directions = directions
        self.next_bit = 2
        self.alias: dict[int, int | str] = {}
        self.cells: dict[str, dict] = {}
        self.netnames: dict[str, dict] = {}

    def new_bits(self, n: int) -> list[int]:
        b = self.next_bit
        self.next_bit += n
        return list(range(b, b + n))

    def find(self, b):
        while isinstance(b, int) and b in self.alias:
            b = self.alias[b]
        return b

    def union(self, a, b) -> None:
        a, b = self.find(a), self.find(b)
        if a == b:
            return
        if isinstance(a, str) and isinstance(b, str):
            raise RtlilError(f"constants {a!r} and {b!r} are connected together")
        if isinstance(a, str):
            a, b = b, a
        self.alias[a] = b          # a constant, or the other net, stands for both

    def instance(self, mod: _Module, prefix: tuple[str, ...], ports: dict[str, list]) -> None:
        """Adds ``mod``'s cells and wire names below ``prefix``, its port wires bound to ``ports``' bits."""
        bits_of: dict[str, list] = {}
        for name, w in mod.wires.items():
            if w.direction is not None and prefix:
                bits = ports.get(name)
                if bits is None:                          # an unconnected port: its own net
                    bits = self.new_bits(w.width)
                elif len(bits) != w.width:
                    raise RtlilError(f"port {name} of {mod.name} ({w.width} bits) is connected to {len(bits)} bits "
                                     f"at {'.'.join(prefix)}")
            else:
                bits = self.new_bits(w.width)
            bits_of[name] = bits
            full = ".".join(prefix + (name,))
            self.netnames[full] = {"hide_name": int(name.startswith("$")), "bits": bits,
                                   "attributes": {"hdlname": " ".join(prefix + (name,))} if prefix else {}}

        def wire_bits(name: str) -> list:
            try:
                return bits_of[name]
            except KeyError:
                raise RtlilError(f"module {mod.name} uses wire {name}, which it does not declare") from None

        where = f"module {mod.name}"
        for lhs, rhs in mod.connects:
            a, b = _bits(lhs, wire_bits, where), _bits(rhs, wire_bits, where)
            if len(a) != len(b):
                raise RtlilError(f"{where}: connect of {len(a)} to {len(b)} bits")
            for x, y in zip(a, b):
                self.union(x, y)
        for ctype, cname, conns in mod.cells:
            bound = {pin: _bits(sig, wire_bits, f"{where}, cell {cname}") for pin, sig in conns.items()}
            sub = self.modules.get(ctype)
            if sub is not None:
                self.instance(sub, prefix + (cname,), bound)
                continue
            path = prefix + (cname,)
            self.cells[".".join(path)] = {
                "hide_name": int(cname.startswith("$")), "type": ctype, "parameters": {},
                "attributes": {"hdlname": " ".join(path)} if prefix else {},
                "port_directions": self.directions(ctype), "connections": bound}

    def resolve(self) -> None:
        """Every bit of a net joined by a module-level connect becomes the one that stands for the net."""
        if not self.alias:
            return
        for c in self.cells.values():
            c["connections"] = {p: [self.find(b) for b in bits] for p, bits in c["connections"].items()}
        for n in self.netnames.values():
            n["bits"] = [self.find(b) for b in n["bits"]]


def flatten_rtlil(il: Path, macros_v: str, top: str, cell_directions: Callable[[str], dict[str, str]]) -> dict:
    """The flat module of ``top`` from the RTLIL file ``il``: leaf cells are liberty cells (port directions
    from ``cell_directions(type)``) or macros of ``macros_v``."""
    modules = read_rtlil(il)
    if top not in modules:
        raise RtlilError(f"{il} has no module {top} (modules: {', '.join(sorted(modules)[:5])} ...)")
    macros = macro_directions(macros_v)
    known: dict[str, dict[str, str]] = {}

    def directions(ctype: str) -> dict[str, str]:
        d = known.get(ctype)
        if d is None:
            d = known[ctype] = macros[ctype] if ctype in macros else cell_directions(ctype)
        return d

    f = _Flattener(modules, directions)
    f.instance(modules[top], (), {})
    f.resolve()
    ports = [(name, w.direction) for name, w in sorted(modules[top].wires.items(), key=lambda kv: kv[1].port_id)
             if w.direction]
    return _as_json(ports, f.cells, f.netnames)


def _as_json(ports: list[tuple[str, str]], cells: dict[str, dict], netnames: dict[str, dict]) -> dict:
    """The module as Yosys' write_json gives it: cells, their connections and net names sorted by name, bits
    numbered from 2 in the order the writer meets them (ports, then each cell's connections, then the names):
    the same netlist numbers alike whichever tool flattened it, and placement, which orders nets by bit,
    gives the same result."""
    number: dict[int, int] = {}

    def renumber(bits: list) -> list:
        out = []
        for b in bits:
            if isinstance(b, int):
                n = number.get(b)
                if n is None:
                    n = number[b] = len(number) + 2
                b = n
            out.append(b)
        return out

    out_ports = {name: {"direction": d, "bits": renumber(netnames[name]["bits"])} for name, d in ports}
    out_cells = {}
    for key in sorted(cells):
        c = cells[key]
        c["connections"] = {pin: renumber(c["connections"][pin]) for pin in sorted(c["connections"])}
        out_cells[key] = c
    out_nets = {}
    for key in sorted(netnames):
        n = netnames[key]
        n["bits"] = renumber(n["bits"])
        out_nets[key] = n
    return {"ports": out_ports, "cells": out_cells, "netnames": out_nets}
