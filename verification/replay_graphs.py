"""One synthesis part's netlist as an and-inverter graph for verification.replay: the cells replaced by their
liberty models (flow.cell_models), the macros and the other parts it instantiates cut out at their pins, turned
into a graph by Yosys in a child process (``write_aiger``), cached per part by the hash of what made it. For power,
the cells' output pins can be made outputs of the graph too (``expose``), with the part's cells listed under the
names OpenSTA gives them.
"""
from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path

from verification.aig import read_aig
from verification.equiv import CUT_MACROS, READ_MACRO_STUBS, REPO, Job

# A part's netlist as a graph: cell models in, the macros and the other parts it instantiates cut out at their pins
# (each pin a port named <instance>.<pin>), flip-flops plain, undriven bits 0
GRAPH_PASSES = ("proc", "flatten", "opt_clean", "{cut}", "setundef -undriven -zero", "techmap", "opt -fast",
                "dffunmap", "aigmap", "setundef -zero", "opt_clean")
WRITE_GRAPH = "write_aiger -ascii -no-sort"     # outputs in port order (complete_outputs)


class ReplayError(RuntimeError):
    """The replay cannot start or cannot continue (missing synthesis, unknown pin, a loop that does not settle)."""


def graph_script(job: Job, cells: Path, stubs: Path | None, aag: Path, symbols: Path,
                 expose: tuple[str, ...] = ()) -> list[str]:
    """The Yosys passes of one part's graph; ``expose``: the cells' output pin names to make outputs of the graph
    (each ``<instance>.<pin>`` once ``flatten`` has inlined the cell models), for their toggle counts."""
    cut = CUT_MACROS + "".join(f" t:{b}" for b in job.boxes)
    passes = [p.format(cut=cut) for p in GRAPH_PASSES]
    if expose:
        passes.insert(passes.index("flatten") + 1, "expose " + " ".join(f"w:*.{pin}" for pin in expose))
    return [f"{READ_MACRO_STUBS} {job.macro_stubs}", *([f"read_verilog -lib {stubs}"] if stubs else []),
            f"read_verilog -sv {cells}", f"read_verilog {job.netlist}", f"hierarchy -top {job.top}",
            *passes, f"{WRITE_GRAPH} -map {symbols} {aag}"]


def _graph_worker(script_json: str, ports: str | None = None, leaves: str | None = None,
                  cell_names: tuple[str, ...] = ()) -> None:
    """Runs in the child: the passes of one part's graph; with ``ports``, the top module's output ports (name,
    width, in port order) are written there as JSON before the last pass (``complete_outputs`` needs them); with
    ``leaves``, the part's library cells (``cell_names``) at every level of its hierarchy, before ``flatten``:
    {flattened name: [hierarchical path, cell]}, the path as OpenSTA names the instance (``a/b/_12_``)."""
    from pyosys import libyosys as ys

    from flow.cli import die_with_parent
    die_with_parent()
    design = ys.Design()
    script = json.loads(script_json)
    for k, cmd in enumerate(script):
        if ports and k == len(script) - 1:
            m = design.top_module()
            outs = [(p.str()[1:], m.wire(p).width) for p in m.ports if m.wire(p).port_output]
            Path(ports).write_text(json.dumps(outs))
        if leaves and cmd == "flatten":
            Path(leaves).write_text(json.dumps(_leaf_cells(design, set(cell_names))))
        print(f"@@PASS {cmd}", flush=True)
        ys.run_pass(cmd, design)


def _leaf_cells(design, cell_names: set[str]) -> dict[str, list[str]]:
    """Every instance of a library cell under the top module: {``a.b._12_``: [``a/b/_12_``, cell]}."""
    found = {}

    def walk(module, path: list[str]) -> None:
        for cell in module.cells_.values():
            kind, name = cell.type.str().lstrip("\\"), cell.name.str().lstrip("\\")
            if kind in cell_names:
                found[".".join([*path, name])] = ["/".join([*path, name]), kind]
            elif design.module(cell.type) is not None:
                walk(design.module(cell.type), [*path, name])

    walk(design.top_module(), [])
    return found


def complete_outputs(aig, ports: list[tuple[str, int]], where: Path) -> None:
    """Name the outputs ``write_aiger -map`` leaves unnamed (those driven by a constant) from the output ports in
    port order: with ``-no-sort`` it writes them port by port, the most significant bit first. Every output the
    map does name must sit where that order puts it, or the graph is refused."""
    order = [(name, bit) for name, width in ports for bit in reversed(range(width))]
    if len(order) != len(aig.outputs):
        raise ReplayError(f"{where}: {len(aig.outputs)} outputs, the output ports have {len(order)} bits")
    wrong = [(k, named, order[k]) for k, named in aig.output_names.items() if order[k] != named]
    if wrong:
        raise ReplayError(f"{where}: write_aiger's output order is not the port order assumed (first: output "
                          f"{wrong[0][0]} is {wrong[0][1]}, expected {wrong[0][2]})")
    aig.output_names = dict(enumerate(order))


def part_graph(job: Job, folder: Path, cells: Path, expose: tuple[str, ...] = (), cell_names: tuple[str, ...] = ()):
    """The graph of one part (``GRAPH_PASSES``), from ``folder`` when its netlist, cell models and passes are the
    same as when it was made. With ``expose`` (cell output pins, see graph_script) it also returns the part's
    instances of the library cells ``cell_names`` (``_leaf_cells``), else None."""
    key = hashlib.sha256()
    for f in (job.netlist, cells):
        key.update(f.read_bytes())
    key.update(json.dumps([READ_MACRO_STUBS, CUT_MACROS, GRAPH_PASSES, WRITE_GRAPH, job.boxes, job.box_stubs,
                           *([list(expose), sorted(cell_names)] if expose else [])]).encode())
    stem = f"{job.top}-{key.hexdigest()[:16]}"          # (the part's name has dots: no with_suffix)
    aag, symbols, ports = folder / f"{stem}.aag", folder / f"{stem}.map", folder / f"{stem}.ports.json"
    leaves = folder / f"{stem}.cells.json" if expose else None
    if not all(f.is_file() for f in (aag, symbols, ports, *([leaves] if leaves else []))):
        folder.mkdir(parents=True, exist_ok=True)
        stubs = None
        if job.boxes:
            stubs = folder / f"{stem}.boxes.v"
            stubs.write_text(job.box_stubs)
        tmp_aag, tmp_sym = folder / f"{stem}.aag.tmp", folder / f"{stem}.map.tmp"
        tmp_leaves = leaves and folder / f"{stem}.cells.json.tmp"
        script = graph_script(job, cells, stubs, tmp_aag, tmp_sym, expose)
        log = folder / f"{stem}.log"
        with log.open("w") as fh:
            proc = subprocess.run([sys.executable, "-c", "from verification.replay_graphs import _graph_worker; "
                                   f"_graph_worker({json.dumps(json.dumps(script))}, {str(ports)!r}, "
                                   f"{str(tmp_leaves) if tmp_leaves else None!r}, {tuple(cell_names)!r})"], stdout=fh,
                                  stderr=subprocess.STDOUT, cwd=REPO)
        if proc.returncode != 0 or not tmp_aag.is_file():
            raise ReplayError(f"part {job.top}: Yosys could not write its graph (exit {proc.returncode}); see {log}")
        if tmp_leaves:
            tmp_leaves.replace(leaves)
        tmp_sym.replace(symbols)
        tmp_aag.replace(aag)
    aig = read_aig(aag, symbols)
    complete_outputs(aig, json.loads(ports.read_text()), aag)
    return aig, (json.loads(leaves.read_text()) if leaves else None)
