"""Verilog simulation models of the Nangate45 standard cells, generated from the liberty file.

    python -m flow.cell_models [--out build/cell_models] [--corner typical]

Each cell's model comes from its liberty description alone: an output pin's ``function`` (or
``state_function``) becomes a continuous assignment; an ``ff`` group a flip-flop (``always @(posedge
clocked_on ...)``, asynchronous ``clear`` / ``preset`` in the sensitivity list, ``clear_preset_var1/2`` when
both are active); a ``latch`` group and a level-sensitive ``statetable`` (the clock-gating cells) an
``always_latch`` block. Models are zero-delay and use no UDPs, so Verilator builds them (gate-level
simulation, ``verification/gatesim.py``). Cells with a ``three_state`` output (TBUF, TINV, TLAT) are left
out and listed with the reason in the file's header and ``cells.json``: synthesis never maps to them, and a
netlist that used them is refused by ``verification.gatesim`` naming the cell.

Clear and preset active together: the outputs follow ``clear_preset_var1/2``; when one of them is released
the other one sets the state (it has its own event: ``posedge`` of "clear and not preset"), so the state
after both are released is that of the one released last, as the liberty describes.

The models are written to the build folder (``<out>/nangate45_cells.v`` and ``cells.json``), never into the
repository, and written again only when the liberty file (or this generator) changes: ``cells.json`` keeps the
digest of both.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

from flow.toolchain import work_root
from pdk_config import PdkError, find_pdk

REPO = Path(__file__).resolve().parent.parent
DEFAULT_OUT = work_root() / "cell_models"
MODELS_FILE, INDEX_FILE = "nangate45_cells.v", "cells.json"
CORNER = "typical"          # every corner's liberty has the same functions; synthesis maps at typical


class CellModelError(RuntimeError):
    """The liberty file could not be read or a cell cannot be modelled; the message says which and why."""


# ---- liberty: groups, simple and complex attributes -------------------------------------------------------
@dataclass
class Group:
    kind: str                                   # cell, pin, ff, latch, statetable, timing, ...
    args: tuple[str, ...]
    attrs: dict[str, str] = field(default_factory=dict)
    groups: list["Group"] = field(default_factory=list)

    def sub(self, kind: str) -> list["Group"]:
        return [g for g in self.groups if g.kind == kind]


_TOKEN = re.compile(r'"(?:[^"\\]|\\.)*"|[(){}:;,]|[^\s(){}:;,"]+')
_COMMENT = re.compile(r"/\*.*?\*/|//[^\n]*", re.S)


def parse_liberty(text: str) -> Group:
    """The top ``library`` group of a liberty file (values unquoted; line continuations joined)."""
    toks = _TOKEN.findall(_COMMENT.sub(" ", text.replace("\\\n", " ")))
    pos = 0

    def value(t: str) -> str:
        return t[1:-1] if t.startswith('"') else t

    def statement() -> tuple[str, object]:
        nonlocal pos
        name = toks[pos]
        pos += 1
        if toks[pos] == ":":                        # name : value ;
            val = value(toks[pos + 1])
            pos += 2
            if pos < len(toks) and toks[pos] == ";":
                pos += 1
            return "attr", (name, val)
        if toks[pos] != "(":
            raise CellModelError(f"liberty: unexpected {toks[pos]!r} after {name!r} (token {pos})")
        pos += 1
        args = []
        while toks[pos] != ")":
            if toks[pos] != ",":
                args.append(value(toks[pos]))
            pos += 1
        pos += 1
        if pos < len(toks) and toks[pos] == "{":     # name (args) { ... }
            pos += 1
            g = Group(name, tuple(args))
            while toks[pos] != "}":
                what, item = statement()
                if what == "attr":
                    g.attrs[item[0]] = item[1]
                else:
                    g.groups.append(item)
            pos += 1
            return "group", g
        if pos < len(toks) and toks[pos] == ";":     # name (args) ;  (a complex attribute)
            pos += 1
        return "attr", (name, ",".join(args))

    what, top = statement()
    if what != "group" or top.kind != "library":
        raise CellModelError("liberty: the file does not start with a library group")
    return top


# ---- boolean functions: liberty syntax -> AST -> Verilog -------------------------------------------------
# Liberty precedence, high to low: ! and postfix ', then ^, then & * and juxtaposition, then | +.
_EXPR_TOKEN = re.compile(r"\s*(?:([A-Za-z_][A-Za-z0-9_]*)|([01])|([!'*&+|^()]))")


def parse_function(text: str) -> tuple:
    """A liberty function string as a tuple tree: ("var", name), ("const", 0|1), ("not", e),
    ("and" | "or" | "xor", a, b)."""
    toks, i = [], 0
    while i < len(text):
        if text[i:].strip() == "":
            break
        m = _EXPR_TOKEN.match(text, i)
        if not m:
            raise CellModelError(f"function {text!r}: cannot read {text[i:]!r}")
        toks.append(("var", m[1]) if m[1] else ("const", int(m[2])) if m[2] else ("op", m[3]))
        i = m.end()
    pos = 0

    def peek():
        return toks[pos] if pos < len(toks) else ("end", None)

    def binary(sub, ops: str, kind: str, juxtapose: bool = False):
        nonlocal pos
        left = sub()
        while True:
            t = peek()
            if t[0] == "op" and t[1] in ops:
                pos += 1
            elif not (juxtapose and (t[0] in ("var", "const") or t[1] in ("(", "!"))):
                return left
            left = (kind, left, sub())

    def unary():
        nonlocal pos
        t = peek()
        pos += 1
        if t == ("op", "!"):
            e = ("not", unary())
        elif t == ("op", "("):
            e = disj()
            if peek() != ("op", ")"):
                raise CellModelError(f"function {text!r}: missing ')'")
            pos += 1
        elif t[0] in ("var", "const"):
            e = t
        else:
            raise CellModelError(f"function {text!r}: unexpected {t[1]!r}")
        while peek() == ("op", "'"):
            pos += 1
            e = ("not", e)
        return e

    def xor():
        return binary(unary, "^", "xor")

    def conj():
        return binary(xor, "*&", "and", juxtapose=True)

    def disj():
        return binary(conj, "+|", "or")

    tree = disj()
    if pos != len(toks):
        raise CellModelError(f"function {text!r}: unexpected {toks[pos][1]!r}")
    return tree


_VERILOG_OP = {"and": "&", "or": "|", "xor": "^"}


def verilog_expr(tree: tuple) -> str:
    kind = tree[0]
    if kind == "var":
        return tree[1]
    if kind == "const":
        return f"1'b{tree[1]}"
    if kind == "not":
        return f"~{verilog_expr(tree[1])}"
    return f"({verilog_expr(tree[1])} {_VERILOG_OP[kind]} {verilog_expr(tree[2])})"


def _variables(tree: tuple) -> set[str]:
    if tree[0] == "var":
        return {tree[1]}
    return set().union(*(_variables(t) for t in tree[1:] if isinstance(t, tuple)))


def verilog_of(function: str) -> str:
    return verilog_expr(parse_function(function))


# ---- cells ------------------------------------------------------------------------------------------------
_STATE_VALUE = {"L": "1'b0", "H": "1'b1"}      # clear_preset_var1/2 values a model supports


@dataclass(frozen=True)
class Cell:
    name: str
    kind: str                                   # combinational | ff | latch | statetable | no_output
    inputs: tuple[str, ...]
    outputs: dict[str, str]                     # output pin -> liberty function
    state: dict[str, str] = field(default_factory=dict)   # the ff / latch / statetable group's attributes
    state_vars: tuple[str, ...] = ()            # ("IQ", "IQN") of ff/latch, (internal node,) of a statetable


def _cell(g: Group) -> Cell:
    """A modellable Cell, or a CellModelError saying why this one is not."""
    name = g.args[0]
    pins = g.sub("pin")
    for bus in ("bus", "bundle"):
        if g.sub(bus):
            raise CellModelError(f"{name}: {bus} pins are not supported")
    tristate = [p.args[0] for p in pins if "three_state" in p.attrs]
    if tristate:
        raise CellModelError(f"{name}: three_state output {tristate[0]} (tristate cells are not modelled)")
    inputs = tuple(p.args[0] for p in pins if p.attrs.get("direction") == "input")
    outputs = {}
    for p in pins:
        if p.attrs.get("direction") in ("output", "inout"):
            fn = p.attrs.get("function", p.attrs.get("state_function"))
            if fn is None:
                raise CellModelError(f"{name}: output {p.args[0]} has no function")
            outputs[p.args[0]] = fn
    seq = [s for kind in ("ff", "latch", "statetable", "ff_bank", "latch_bank") for s in g.sub(kind)]
    if len(seq) > 1 or (seq and seq[0].kind.endswith("_bank")):
        raise CellModelError(f"{name}: {', '.join(s.kind for s in seq)} (one ff, latch or statetable is supported)")
    if not seq:
        return Cell(name, "combinational" if outputs else "no_output", inputs, outputs)
    s = seq[0]
    if s.kind == "statetable":
        nodes = [p.attrs["internal_node"] for p in pins if "internal_node" in p.attrs]
        return Cell(name, "statetable", inputs, outputs, dict(s.attrs, inputs=s.args[0]), tuple(nodes[:1]))
    for var in ("clear_preset_var1", "clear_preset_var2"):
        if var in s.attrs and s.attrs[var] not in _STATE_VALUE:
            raise CellModelError(f"{name}: {var} {s.attrs[var]!r} (supported: L, H)")
    if "clocked_on_also" in s.attrs:
        raise CellModelError(f"{name}: clocked_on_also (master-slave) is not supported")
    return Cell(name, s.kind, inputs, outputs, dict(s.attrs), tuple(s.args))


def read_cells(liberty_text: str) -> tuple[list[Cell], dict[str, str]]:
    """Every cell of the library that can be modelled, and {cell: reason} for those that cannot."""
    cells, skipped = [], {}
    for g in parse_liberty(liberty_text).sub("cell"):
        try:
            cell = _cell(g)
            cell_verilog(cell)                  # functions and tables that cannot be read: no model either
            cells.append(cell)
        except CellModelError as e:
            name = g.args[0]
            skipped[name] = str(e) if str(e).startswith(f"{name}:") else f"{name}: {e}"
    return cells, skipped


def _async_terms(cell: Cell, iq: str) -> tuple[list[str], list[str], list[str]]:
    """(wire declarations, events, if/else-if lines setting ``iq``) of a flop's or latch's clear and preset."""
    s = cell.state
    decls, events, chain = [], [], []
    clear, preset = s.get("clear"), s.get("preset")
    if clear:
        decls.append(f"  wire clear_ = {verilog_of(clear)};")
        events.append("clear_")
    if preset:
        decls.append(f"  wire preset_ = {verilog_of(preset)};")
        events.append("preset_")
    if clear and preset:    # releasing one while the other stays active is an event too
        decls += ["  wire clear_only_ = clear_ & ~preset_;", "  wire preset_only_ = preset_ & ~clear_;"]
        events += ["clear_only_", "preset_only_"]
        chain.append(f"if (clear_ & preset_) {iq} <= {_STATE_VALUE[s.get('clear_preset_var1', 'L')]};")
    if clear:
        chain.append(f"if (clear_) {iq} <= 1'b0;")
    if preset:
        chain.append(f"if (preset_) {iq} <= 1'b1;")
    return decls, events, chain


def _state_lines(cell: Cell) -> list[str]:
    """The state-holding part of a sequential model (its variables, always block, inverted variable)."""
    s = cell.state
    if cell.kind == "statetable":
        return _statetable_lines(cell)
    iq, iqn = cell.state_vars
    decls, events, chain = _async_terms(cell, iq)
    lines = [f"  reg {iq};", *decls]
    if cell.kind == "ff":
        events = [f"posedge {verilog_of(s['clocked_on'])}"] + [f"posedge {e}" for e in events]
        chain.append(f"{iq} <= {verilog_of(s['next_state'])};")
        lines.append(f"  always @({' or '.join(events)})")
    else:
        chain.append(f"if ({verilog_of(s['enable'])}) {iq} <= {verilog_of(s['data_in'])};")
        chain = [c.replace("<=", "=") for c in chain]           # a latch is level-sensitive: blocking
        lines.append("  always_latch")
    lines += ["    " + ("" if i == 0 else "else ") + c for i, c in enumerate(chain)]
    if any(iqn in _variables(parse_function(fn)) for fn in cell.outputs.values()):
        var2 = _STATE_VALUE[s.get("clear_preset_var2", "H")]
        both = "clear" in s and "preset" in s
        lines.append(f"  wire {iqn} = " + (f"(clear_ & preset_) ? {var2} : ~{iq};" if both else f"~{iq};"))
    return lines


_LEVEL = {"L": "~{}", "H": "{}"}


def _statetable_lines(cell: Cell) -> list[str]:
    """A level-sensitive statetable as an always_latch chain of its rows (rows that keep the state: no branch)."""
    names = cell.state["inputs"].split()
    node = cell.state_vars[0] if cell.state_vars else None
    lines, chain = [f"  reg {node};"], []
    for row in cell.state["table"].split(","):
        fields = [f.split() for f in row.split(":")]
        if len(fields) != 3 or len(fields[0]) != len(names) or len(fields[1]) != 1 or len(fields[2]) != 1:
            raise CellModelError(f"{cell.name}: statetable row {row.strip()!r} is not 'inputs : state : next'")
        (ins, (now,), (nxt,)) = fields
        conds = [_LEVEL[v].format(n) for n, v in zip(names, ins) if v != "-"]
        bad = [v for v in (*ins, now) if v not in ("L", "H", "-")] + ([nxt] if nxt not in ("L", "H", "N") else [])
        if bad:
            raise CellModelError(f"{cell.name}: statetable value {bad[0]!r} (supported: L H - ; next L H N)")
        conds += [_LEVEL[now].format(node)] if now != "-" else []
        if nxt != "N":
            chain.append(f"if ({' & '.join(conds) or '1'}) {node} = {_STATE_VALUE[nxt]};")
    lines.append("  always_latch")
    lines += ["    " + ("" if i == 0 else "else ") + c for i, c in enumerate(chain)]
    return lines


def cell_verilog(cell: Cell) -> str:
    ports = [*cell.inputs, *cell.outputs]
    lines = [f"module {cell.name} ({', '.join(ports)});" if ports else f"module {cell.name};"]
    lines += [f"  input {p};" for p in cell.inputs] + [f"  output {p};" for p in cell.outputs]
    if cell.kind in ("ff", "latch", "statetable"):
        lines += _state_lines(cell)
    lines += [f"  assign {p} = {verilog_of(fn)};" for p, fn in cell.outputs.items()]
    if cell.kind == "no_output":            # filler, antenna: inputs that nothing reads, by design
        lines = ["/* verilator lint_off UNUSEDSIGNAL */", *lines, "endmodule", "/* verilator lint_on UNUSEDSIGNAL */", ""]
        return "\n".join(lines)
    return "\n".join(lines + ["endmodule", ""])


# ---- the generated files ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class CellModels:
    verilog: Path
    index: Path
    cells: dict[str, dict]                      # name -> {kind, inputs, outputs, state}
    skipped: dict[str, str]                     # name -> why it has no model


def _digest(liberty: Path) -> str:
    h = hashlib.sha256(liberty.read_bytes())
    h.update(Path(__file__).read_bytes())
    return h.hexdigest()


def generate(liberty: Path, out: Path) -> CellModels:
    """Write ``<out>/nangate45_cells.v`` and ``cells.json`` for ``liberty`` unless they are there for the same
    liberty and generator; returns what is there."""
    liberty, out = Path(liberty), Path(out)
    if not liberty.is_file():
        raise CellModelError(f"liberty file {liberty} not found")
    digest = _digest(liberty)
    index, verilog = out / INDEX_FILE, out / MODELS_FILE
    if index.is_file() and verilog.is_file():
        known = json.loads(index.read_text())
        if known.get("digest") == digest:
            return CellModels(verilog, index, known["cells"], known["skipped"])
    cells, skipped = read_cells(liberty.read_text(errors="replace"))
    header = [f"// Nangate45 cell models generated by flow/cell_models.py from {liberty.name}",
              f"// liberty + generator sha256 {digest}; zero delay, no UDPs; not for the repository",
              *[f"// no model: {reason}" for reason in skipped.values()],
              "/* verilator lint_off DECLFILENAME */      // one file holds the library", ""]
    out.mkdir(parents=True, exist_ok=True)
    tmp = verilog.with_suffix(".tmp")
    tmp.write_text("\n".join(header) + "\n".join(cell_verilog(c) for c in cells) + "/* verilator lint_on DECLFILENAME */\n")
    tmp.replace(verilog)
    info = {c.name: {"kind": c.kind, "inputs": list(c.inputs), "outputs": c.outputs, "state": c.state,
                     "state_vars": list(c.state_vars)} for c in cells}
    index.write_text(json.dumps({"digest": digest, "liberty": str(liberty), "cells": info, "skipped": skipped},
                                indent=1) + "\n")
    return CellModels(verilog, index, info, skipped)


def ensure_models(out: Path = DEFAULT_OUT, corner: str = CORNER, cache: Path = REPO / "build" / "pdk_cache") -> CellModels:
    """The models of the PDK that ``pdk_config.find_pdk()`` finds (a PdkError says how to point at one)."""
    return generate(find_pdk().plain_liberty(corner, cache), out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m flow.cell_models", description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT)
    ap.add_argument("--corner", default=CORNER)
    args = ap.parse_args(argv)
    try:
        m = ensure_models(args.out, args.corner)
    except (PdkError, CellModelError) as e:
        print(f"flow.cell_models: {e}", file=sys.stderr)
        return 1
    kinds: dict[str, int] = {}
    for c in m.cells.values():
        kinds[c["kind"]] = kinds.get(c["kind"], 0) + 1
    print(f"{m.verilog}: {len(m.cells)} cells ({', '.join(f'{n} {k}' for k, n in sorted(kinds.items()))}); "
          f"no model for {len(m.skipped)}: {', '.join(m.skipped)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
