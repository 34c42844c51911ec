"""Yosys clean-up between Amaranth's RTLIL and ``write_verilog``: Verilog a strict linter accepts.

SPEC_NANO_KPU.md §7 counts ``verilator --lint-only -Wall`` warnings with no waivers. Amaranth's own
Verilog keeps processes as ``casez`` blocks without a default, gives every register an initial value
beside its reset, and writes operators whose operands are narrower or wider than the expression's
result, all of which are legal Verilog that Verilator's style rules flag. This module runs on a
pyosys design instead:

* ``proc -norom`` (processes become multiplexers; a constant table stays logic: SPEC §5 forbids
  arrays), ``opt_clean -purge``, ``wreduce``; ``split_self_aliases`` after it (``w[8] = w[7]`` is a loop to Verilator);
* ``pmux_as_and_or``: a one-hot case table (``$pmux``) is written as the AND-OR form synthesis maps it
  to (write_verilog's ``casez`` has overlapping patterns; a mux chain instead, Yosys's ``pmuxtree``,
  cost the nano MAC array 3.8 % more area: 720,560 against 693,995 um2, AND-OR 692,351, measured by
  ``python -m flow.synth --rtl build/rtl --top msh_chip_top.core.mac`` on each emission);
* register initial values are dropped: the chip relies on ``rst_n`` only (SPEC §7 checks outputs are
  byte-identical from a random initial state), so an ``initial`` value would only hide a missing reset;
* ``normalise_widths``: every operator cell gets operands exactly as wide as Verilog evaluates them
  (sign or zero extension written out, surplus high bits of add/sub/mul/bitwise operands dropped,
  which never changes the result bits), comparisons and logic operators a one-bit result;
* ``narrow_inputs`` and ``sink_dropped_bits``: no unread bit is left for Verilator's UNUSEDSIGNAL but
  those a generator names and never reads (those are defects lint should report).

Nothing here changes what a signal computes: tests/test_lint_clean.py has Yosys prove it, and the chip
simulates bit-exact before and after.
"""
from __future__ import annotations

import contextlib
import itertools
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

from pyosys import libyosys as ys

from flow.synth import MACRO_STUBS
from flow.toolchain import repo_pythonpath
from rtl_gen.stable_names import renumber

# Cells whose low Y bits depend only on the low bits of A and B (operands can be cut or extended to Y).
_TRUNCATING = {"$add", "$sub", "$mul", "$and", "$or", "$xor", "$xnor"}
_UNARY = {"$not", "$neg", "$pos"}
_COMPARE = {"$eq", "$ne", "$lt", "$le", "$gt", "$ge", "$eqx", "$nex"}
_LOGIC = {"$logic_not", "$logic_and", "$logic_or"}
_REDUCE = {"$reduce_and", "$reduce_or", "$reduce_xor", "$reduce_xnor", "$reduce_bool"}
_LEFT_SHIFT = {"$shl", "$sshl"}
_RIGHT_SHIFT = {"$shr", "$sshr", "$shift", "$shiftx"}

PASSES = ("proc -norom", "opt_clean -purge", "wreduce", "opt_clean -purge")


def _id(name: str) -> ys.IdString:
    return ys.IdString(name)


_NAMES = itertools.count()


def _new_name(module, what: str) -> ys.IdString:
    """A fresh internal name (``$lint$<what>$<n>``) not yet used in ``module``."""
    while True:
        name = _id(f"$lint${what}${next(_NAMES)}")
        if not module.count_id(name):
            return name


def _resized(sig: ys.SigSpec, width: int, signed: bool) -> ys.SigSpec:
    out = ys.SigSpec(sig)
    out.extend_u0(width, signed)
    return out


def _flag(cell, name: str) -> bool:
    return cell.hasParam(_id(name)) and cell.getParam(_id(name)).as_bool()


def _set_operand(cell, port: str, width: int, signed: bool) -> None:
    cell.setPort(_id("\\" + port), _resized(cell.getPort(_id("\\" + port)), width, signed))
    cell.setParam(_id(f"\\{port}_WIDTH"), ys.Const(width, 32))


def _one_bit_result(module, cell) -> None:
    """A comparison, logic or reduce cell drives one bit; the other bits of its old Y read 0."""
    y = cell.getPort(_id("\\Y"))
    if y.size() > 1:
        module.connect(y.extract(1, y.size() - 1), ys.SigSpec(0, y.size() - 1))
        cell.setPort(_id("\\Y"), y.extract(0, 1))
        cell.setParam(_id("\\Y_WIDTH"), ys.Const(1, 32))


def _bool_operand(module, cell, port: str) -> None:
    """A multi-bit operand of a logic operator becomes the output of a ``|x`` reduce cell."""
    sig = cell.getPort(_id("\\" + port))
    if sig.size() > 1:
        w = module.addWire(_new_name(module, "bool"), 1)
        module.addReduceBool(_new_name(module, "reduce"), sig, ys.SigSpec(w))
        cell.setPort(_id("\\" + port), ys.SigSpec(w))
        cell.setParam(_id(f"\\{port}_WIDTH"), ys.Const(1, 32))
        cell.setParam(_id(f"\\{port}_SIGNED"), ys.Const(0, 32))


def _normalise_cell(module, cell) -> None:
    kind = cell.type.str()
    if kind in _TRUNCATING or kind in _UNARY or kind in _LEFT_SHIFT:
        width = cell.getParam(_id("\\Y_WIDTH")).as_int()
        _set_operand(cell, "A", width, _flag(cell, "\\A_SIGNED"))
        if kind in _TRUNCATING:
            _set_operand(cell, "B", width, _flag(cell, "\\B_SIGNED"))
    elif kind in _COMPARE:
        signed = _flag(cell, "\\A_SIGNED") and _flag(cell, "\\B_SIGNED")
        width = max(cell.getParam(_id("\\A_WIDTH")).as_int(), cell.getParam(_id("\\B_WIDTH")).as_int())
        _set_operand(cell, "A", width, signed)
        _set_operand(cell, "B", width, signed)
        _one_bit_result(module, cell)
    elif kind in _LOGIC:
        _bool_operand(module, cell, "A")
        if kind != "$logic_not":
            _bool_operand(module, cell, "B")
        _one_bit_result(module, cell)
    elif kind in _REDUCE:
        _one_bit_result(module, cell)
    elif kind in _RIGHT_SHIFT:
        width, a_width = cell.getParam(_id("\\Y_WIDTH")).as_int(), cell.getParam(_id("\\A_WIDTH")).as_int()
        if a_width < width:
            _set_operand(cell, "A", width, _flag(cell, "\\A_SIGNED"))
        elif a_width > width:          # the whole shifted value, then its low bits (the rest are dropped)
            y = cell.getPort(_id("\\Y"))
            full = ys.SigSpec(module.addWire(_new_name(module, "shifted"), a_width))
            module.connect(y, full.extract(0, width))
            cell.setPort(_id("\\Y"), full)
            cell.setParam(_id("\\Y_WIDTH"), ys.Const(a_width, 32))


def _pmux_as_and_or(module, cell) -> None:
    """A ``$pmux`` (one-hot select) as the AND-OR form Yosys maps it to: Y = |S ? OR_i (B_i & S_i) : A.
    write_verilog would write it as a ``casez`` whose patterns overlap (Verilator's CASEOVERLAP)."""
    a, b, s, y = (cell.getPort(_id(p)) for p in ("\\A", "\\B", "\\S", "\\Y"))
    width, n = a.size(), s.size()
    acc = None
    for i in range(n):
        term = ys.SigSpec(module.addWire(_new_name(module, "pmux_term"), width))
        module.addAnd(_new_name(module, "pmux_and"), b.extract(i * width, width),
                      ys.SigSpec(s.extract(i, 1).as_bit(), width), term)
        if acc is None:
            acc = term
        else:
            both = ys.SigSpec(module.addWire(_new_name(module, "pmux_or"), width))
            module.addOr(_new_name(module, "pmux_or_cell"), acc, term, both)
            acc = both
    any_sel = ys.SigSpec(module.addWire(_new_name(module, "pmux_any"), 1))
    module.addReduceOr(_new_name(module, "pmux_reduce"), s, any_sel)
    module.addMux(_new_name(module, "pmux_mux"), a, acc, any_sel, y)
    module.remove(cell)


def pmux_as_and_or(design) -> None:
    for module in list(dict(design.modules_).values()):
        for cell in list(dict(module.cells_).values()):
            if cell.type.str() == "$pmux":
                _pmux_as_and_or(module, cell)


def _split_self_aliases(module) -> int:
    """``assign w[8] = w[7]`` (a sign bit copied within one wire, as Yosys leaves a widened value) is a
    combinational loop to Verilator (UNOPTFLAT: a wire is one variable): the cell that drives the
    copied bits drives a fresh wire instead, and both the old bits and the copies read that one."""
    conns = list(module.connections())
    selfish = {_bit_key(rb) for lhs, rhs in conns for lb, rb in zip(lhs.bits(), rhs.bits())
               if rb.wire is not None and lb.wire is not None and rb.wire.name == lb.wire.name}
    if not selfish:
        return 0
    moved: dict = {}                            # old bit key -> SigBit of the fresh wire
    for cell in list(dict(module.cells_).values()):
        for port, sig in dict(cell.connections_).items():
            if cell.output(port) and any(_bit_key(b) in selfish for b in sig.bits()):
                fresh = ys.SigSpec(module.addWire(_new_name(module, "driven"), sig.size()))
                cell.setPort(port, fresh)
                module.connect(sig, fresh)
                for k, b in enumerate(sig.bits()):
                    if _bit_key(b) is not None:
                        moved[_bit_key(b)] = fresh.extract(k, 1).as_bit()
    fixed = ys.SigsigVector()
    for lhs, rhs in module.connections():
        bits = [moved.get(_bit_key(rb), rb) if lb.wire is not None and rb.wire is not None
                and lb.wire.name == rb.wire.name else rb for lb, rb in zip(lhs.bits(), rhs.bits())]
        fixed.append((lhs, ys.SigSpec(ys.SigbitVector(bits))))
    module.new_connections(fixed)
    return len(selfish)


def split_self_aliases(design) -> None:
    for module in list(dict(design.modules_).values()):
        _split_self_aliases(module)


def normalise_widths(design) -> None:
    for module in list(dict(design.modules_).values()):
        for cell in list(dict(module.cells_).values()):
            _normalise_cell(module, cell)


def _bit_key(bit) -> tuple[str, int] | None:
    return None if bit.wire is None else (bit.wire.name.str(), bit.offset)


def _read_bits(module) -> set:
    """Wire bits something reads: cell inputs, output ports, and through ``assign`` whatever feeds those."""
    read = set()
    for cell in dict(module.cells_).values():
        for port, sig in dict(cell.connections_).items():
            if not cell.output(port):
                read.update(k for k in map(_bit_key, sig.bits()) if k)
    for wire in dict(module.wires_).values():
        if wire.port_output:
            read.update((wire.name.str(), i) for i in range(wire.width))
    feeds: dict = {}
    for lhs, rhs in module.connections():
        for lb, rb in zip(lhs.bits(), rhs.bits()):
            if _bit_key(rb):
                feeds.setdefault(_bit_key(lb), []).append(_bit_key(rb))
    stack = list(read)
    while stack:
        for k in feeds.get(stack.pop(), ()):
            if k not in read:
                read.add(k)
                stack.append(k)
    return read


def _narrow_input(module, wire, lo: int, n: int) -> None:
    """Make ``wire`` (an input port) an internal wire fed by a new port of its name and ``n`` bits."""
    name = wire.name
    module.rename(wire, _new_name(module, "port"))
    port = module.addWire(name, n)
    port.port_input, wire.port_input = True, False
    module.connect(ys.SigSpec(wire, lo, n), ys.SigSpec(port))


def narrow_inputs(design) -> dict:
    """Input ports of a submodule are cut to the bits something inside reads (Amaranth gives a port
    every bit the parent drives: a whole stream payload of which the unit reads one field, the valid
    of a pipeline whose output valid no one uses); a port read nowhere is removed. Every instance is
    cut alike. Returns {module: {port: (lo, n)}} (n = 0: removed)."""
    modules = dict(design.modules_)
    top = design.top_module()
    cuts: dict = {}
    for name, module in modules.items():
        if module.get_blackbox_attribute() or (top is not None and module.name.str() == top.name.str()):
            continue
        read = _read_bits(module)
        for wire in list(dict(module.wires_).values()):
            if not wire.port_input:
                continue
            used = [i for i in range(wire.width) if (wire.name.str(), i) in read]
            if not used:
                cuts.setdefault(name.str(), {})[wire.name.str()] = (0, 0)
                wire.port_input = False
            elif len(used) < wire.width:
                lo, n = used[0], used[-1] - used[0] + 1
                if n < wire.width:
                    cuts.setdefault(name.str(), {})[wire.name.str()] = (lo, n)
                    _narrow_input(module, wire, lo, n)
        if name.str() in cuts:
            module.fixup_ports()
    for module in modules.values():
        for cell in dict(module.cells_).values():
            for port, (lo, n) in cuts.get(cell.type.str(), {}).items():
                if cell.hasPort(_id(port)):
                    if n:
                        cell.setPort(_id(port), cell.getPort(_id(port)).extract(lo, n))
                    else:
                        cell.unsetPort(_id(port))
    return cuts


def _instance_outputs(module, modules) -> set:
    """Bits driven by an output port of a submodule or macro instance."""
    out = set()
    for cell in dict(module.cells_).values():
        if _id(cell.type.str()) in modules:
            for port, sig in dict(cell.connections_).items():
                if cell.output(port):
                    out.update(k for k in map(_bit_key, sig.bits()) if k)
    return out


def _aliases_of_read_bits(module, read: set) -> set:
    """Bits that are only another name (``assign a = b``) for a bit something reads."""
    out = set()
    for lhs, rhs in module.connections():
        for lb, rb in zip(lhs.bits(), rhs.bits()):
            if _bit_key(rb) in read:
                out.add(_bit_key(lb))
    return out


def sink_dropped_bits(design) -> int:
    """Bits nothing reads that the design drops on purpose are XOR-reduced into one wire per module,
    ``lint_unused_bits``: Verilator's documented idiom for such bits (``--unused-regexp``, default
    ``*unused*``); the sink drives nothing, so synthesis removes it. A bit is dropped on purpose when it
    belongs to a wire the emitter made (``$``-named: Verilog-2005 cannot slice an expression, so the
    emitter names the whole value, e.g. a rounded sum whose low bits go), when a submodule or macro
    output drives it (the consumer uses part of a producer's word, e.g. a ROM word's padding bits), or
    when it is only another name for a bit that is read (Amaranth's flat view of a struct whose
    fields are read by their own names). Any other unread bit is a generator defect that lint
    reports. Returns the number of bits sunk."""
    total = 0
    modules = dict(design.modules_)
    for module in list(modules.values()):
        read = _read_bits(module)
        kept = _instance_outputs(module, modules) | _aliases_of_read_bits(module, read)
        dropped = ys.SigSpec()
        for wire in dict(module.wires_).values():
            name = wire.name.str()
            if wire.port_input or wire.port_output:
                continue
            made = name.lstrip("\\").startswith("$")
            for i in range(wire.width):
                if (name, i) not in read and (made or (name, i) in kept):
                    dropped.append(ys.SigSpec(wire, i, 1))
        if dropped.size():
            sink = module.addWire(_id("\\lint_unused_bits"), 1)
            module.addReduceXor(_new_name(module, "sink"), dropped, ys.SigSpec(sink))
            total += dropped.size()
    return total


def _read_macro_ports(design) -> None:
    """The SPEC §5 macros as blackboxes, so instance outputs (``rdata``) count as driven, not read."""
    with tempfile.NamedTemporaryFile("w", suffix=".v", delete=False) as f:
        f.write(MACRO_STUBS)
    try:
        _run(f"read_verilog -lib {f.name}", design)
    finally:
        os.unlink(f.name)


def _run(cmd: str, design) -> None:
    ys.run_pass(f"tee -q {cmd}", design)        # -q: Yosys logs nothing to the terminal


def clean(design) -> None:
    """Run the clean-up on a pyosys design read from Amaranth's RTLIL (see the module docstring)."""
    global _NAMES
    _NAMES = itertools.count()          # the same design always gets the same names
    _read_macro_ports(design)
    for cmd in PASSES:
        _run(cmd, design)
    pmux_as_and_or(design)
    _run("setattr -unset init", design)
    normalise_widths(design)
    _run("opt_clean -purge", design)
    while narrow_inputs(design):       # a cut port can leave its parent's own input port partly unread
        _run("opt_clean -purge", design)
    split_self_aliases(design)
    sink_dropped_bits(design)
    renumber(design)                    # an engine's text depends on that engine only


def _top_first(text: str, top: str) -> str:
    """The top module first (Verilator's DECLFILENAME: a file is named after its first module)."""
    parts = re.split(r"(?m)^(?=module )", text)
    head, modules = parts[0], parts[1:]
    first = [m for m in modules if re.match(rf"module\s+\\?{re.escape(top)}\s*[(#]", m)]
    return head + "".join(first + [m for m in modules if m not in first])


@contextlib.contextmanager
def _yosys_log(path: Path):
    """Yosys writes to file descriptor 1 (``-- Running command ...``): send it to ``path``; on an error
    the log's tail goes to stderr, so the cause is not lost."""
    sys.stdout.flush()
    saved = os.dup(1)
    try:
        with open(path, "w") as log:
            os.dup2(log.fileno(), 1)
        yield
    except BaseException:
        os.dup2(saved, 1)
        sys.stderr.write("".join(path.read_text().splitlines(keepends=True)[-30:]))
        raise
    finally:
        os.dup2(saved, 1)
        os.close(saved)


def _clean_file(il: Path, v: Path) -> None:
    """This process's half of ``to_verilog``: the RTLIL file ``il`` cleaned into the Verilog file ``v``."""
    design = ys.Design()
    with _yosys_log(v.with_name("yosys.log")):
        _run(f"read_rtlil {il}", design)
        clean(design)
        _run(f"write_verilog -norename -noattr {v}", design)


def to_verilog(rtlil_text: str, top: str) -> str:
    """Amaranth's RTLIL as clean Verilog-2005 (see the module docstring), ``top`` first.

    Yosys runs in a fresh Python process. Yosys orders a design's cells and wires by the numbers of their names
    in one table per process, which every design read before changes, and the clean-up's result depends on that
    order: in one process the tiny chip's second emission came out different from its first (56,986 lines
    against 57,025, equivalent). A fresh process makes the same RTLIL give the same Verilog, so builds and
    syntheses keyed by the Verilog's hash are reused."""
    with tempfile.TemporaryDirectory(prefix="lint_clean.") as tmp:
        il, v = Path(tmp) / "in.il", Path(tmp) / "out.v"
        il.write_text(rtlil_text)
        env = dict(os.environ, PYTHONPATH=repo_pythonpath(os.environ))
        proc = subprocess.run([sys.executable, "-m", "rtl_gen.lint_clean", str(il), str(v)], env=env,
                              capture_output=True, text=True)
        if proc.returncode != 0:
            raise RuntimeError(f"lint_clean of {top} failed (exit {proc.returncode}):\n{proc.stderr[-4000:]}")
        text = v.read_text()
    return _top_first(text, top)


if __name__ == "__main__":
    _clean_file(Path(sys.argv[1]), Path(sys.argv[2]))
