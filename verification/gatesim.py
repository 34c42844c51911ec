"""Gate-level simulation: a block's cocotb testbench against its synthesised Nangate45 netlist.

    python -m verification.gatesim --synth build/synth-dm --block dequant_mac [--out build/gatesim/dequant_mac]
                                   [--cell-models build/cell_models] [--testcase NAME] [--env KEY=VALUE ...]
                                   [--quick-build]

The netlist is flow.synth's (``synth.json`` "files" -> "netlist", the cells of the typical-corner liberty,
``msh_sram`` / ``msh_rom`` left as instances). It is built under Verilator with the cell models of
``flow.cell_models`` (generated from the PDK's liberty into the build folder) and the behavioural
``msh_sram`` / ``msh_rom`` models of ``verification/models/``, and driven by the block's own testbench
``verification/test_<block>.py`` with the same checks, bit for bit against the fixed-point reference, as in
RTL simulation. The testbench reads its sizes from the RTL folder the netlist was synthesised from
(``NANO_K3_RTL_CONFIG`` = its ``config.json``); the simulation runs beside a link to that folder, so the
ROMs' ``rtl/roms/<x>.hex`` files resolve (verification.runner.link_rtl).

A netlist cell without a model (a tristate cell, see flow.cell_models) or a module instantiated but defined
nowhere stops the run before Verilator, naming it.
"""
from __future__ import annotations

import argparse
import json
import re
import sys
import time
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path

from flow.cell_models import DEFAULT_OUT as CELL_MODELS_OUT
from flow.cell_models import CellModelError, CellModels, ensure_models, generate
from flow.toolchain import work_root
from pdk_config import PdkError
from verification.runner import MODELS, REPO, SimFailure, SimResult, link_rtl, run_cocotb

GATESIM_ROOT = work_root() / "gatesim"
CONFIG_ENV = "NANO_K3_RTL_CONFIG"           # where every block testbench reads its config.json
MACRO_MODELS = {"msh_sram": MODELS / "msh_sram.v", "msh_rom": MODELS / "msh_rom.v"}
# Verilator warnings a Yosys netlist raises by construction (generated names, unconnected cell outputs,
# cells whose outputs nothing reads): they say nothing about its function.
NETLIST_WAIVERS = ("-Wno-PINCONNECTEMPTY", "-Wno-PINMISSING", "-Wno-UNUSEDSIGNAL", "-Wno-DECLFILENAME")
# A flat netlist is C++ that takes far longer to compile than to run a few thousand cycles: for short runs
# the compiler's optimiser is turned off (it comes after Verilator's OPT_FAST on the command line).
QUICK_BUILD = ("-CFLAGS", "-O0")
_INSTANCE = re.compile(r"^\s*(\\?[A-Za-z_][\w$]*)\s+(?:#\s*\(|\\?[\w$.\[\]]+\s*\()", re.M)
_MODULE = re.compile(r"^\s*module\s+\\?([\w$]+)", re.M)
_INIT_FILE = re.compile(r'\.INIT_FILE\("([^"]*)"\)')


class GateSimError(RuntimeError):
    """The gate-level run cannot start (missing synthesis, netlist, testbench, model); the message says what."""


@dataclass(frozen=True)
class Netlist:
    top: str
    verilog: Path
    rtl_dir: Path                   # the RTL folder synthesis read (config.json, ROM files)
    cell_types: dict[str, int]      # instantiated module -> count (cells and macros)
    init_files: tuple[str, ...] = ()    # msh_rom INIT_FILE paths, relative to the run folder


def read_synth(synth_dir: Path) -> Netlist:
    """The netlist flow.synth wrote into ``synth_dir`` and the RTL folder it came from."""
    synth_json = Path(synth_dir) / "synth.json"
    if not synth_json.is_file():
        raise GateSimError(f"{synth_json} not found: synthesise first "
                           f"(python -m flow.synth --rtl <rtl folder> --out {synth_dir})")
    r = json.loads(synth_json.read_text())
    verilog = Path(synth_dir) / r["files"]["netlist"]
    if not verilog.is_file():
        raise GateSimError(f"{verilog} (synth.json files.netlist) not found")
    rtl_dir = Path(r["rtl"]["dir"])
    rtl_dir = rtl_dir if rtl_dir.is_absolute() else REPO / rtl_dir
    if not (rtl_dir / "config.json").is_file():
        raise GateSimError(f"{rtl_dir}/config.json, the RTL the netlist was synthesised from, is gone: emit it "
                           f"again (python -m rtl_gen --block <block> --out {rtl_dir})")
    text = verilog.read_text()
    defined = set(_MODULE.findall(text))
    types: dict[str, int] = {}
    for m in _INSTANCE.finditer(text):
        name = m[1].lstrip("\\")
        if name not in ("module", "input", "output", "wire", "inout", "reg", "assign") and name not in defined:
            types[name] = types.get(name, 0) + 1
    return Netlist(r["top"], verilog, rtl_dir, types, tuple(sorted(set(_INIT_FILE.findall(text)))))


def check_rom_files(netlist: Netlist, run_dir: Path) -> None:
    """Every ROM's INIT_FILE must resolve from the run folder (``rtl/`` links to the RTL folder): a missing
    file would read as X or 0 in Verilator, failing the testbench far from the cause."""
    missing = [f for f in netlist.init_files if not (run_dir / f).is_file()]
    if missing:
        raise GateSimError(f"{len(missing)} ROM file(s) of {netlist.verilog} not found from {run_dir} (first: "
                           f"{missing[0]}): write the LUT ROMs into the RTL folder, e.g. python -c \"from nano_k3 "
                           f"import luts; luts.write_roms('{netlist.rtl_dir / 'roms'}')\"")


def sources(netlist: Netlist, models: CellModels) -> list[Path]:
    """The files Verilator reads: cell models, the macro models the netlist uses, the netlist."""
    missing = {t: n for t, n in netlist.cell_types.items() if t not in models.cells and t not in MACRO_MODELS}
    if missing:
        why = [f"{t} ({n}x): {models.skipped.get(t, 'not a cell of the liberty, not a macro')}"
               for t, n in sorted(missing.items())]
        raise GateSimError(f"{netlist.verilog} instantiates modules without a model: " + "; ".join(why))
    macros = [MACRO_MODELS[t] for t in sorted(MACRO_MODELS) if t in netlist.cell_types]
    return [models.verilog, *macros, netlist.verilog]


def test_module(block: str) -> str:
    if block == "chip":
        raise GateSimError("the whole chip's netlist has no gate-level run yet (its testbench is driven by "
                           "verification.chip_run, not a block test module): run a block's netlist, e.g. "
                           "make gatesim BLOCK=dequant_mac")
    path = REPO / "verification" / f"test_{block}.py"
    if not path.is_file():
        raise GateSimError(f"no testbench for block {block!r}: {path} not found")
    return f"verification.test_{block}"


def gatesim(synth_dir: Path, block: str, out: Path | None = None, cell_models: Path = CELL_MODELS_OUT,
            testcase: str | None = None, env: dict[str, str] | None = None,
            liberty: Path | None = None, quick_build: bool = False,
            build_args: tuple[str, ...] = (), test_args: tuple[str, ...] = ()) -> tuple[SimResult, dict]:
    """Build the netlist with its models under Verilator in ``out`` and run the block's cocotb tests there.

    ``liberty``: generate the cell models from this file instead of the PDK's typical corner;
    ``quick_build``: compile without optimisation (``QUICK_BUILD``), for short runs;
    ``build_args``: more Verilator options, ``test_args``: options of the simulation binary (flow.power's
    toggle coverage: ``--coverage-toggle`` and ``--coverage-per-instance``).
    Returns the cocotb result (failing tests raise SimFailure) and a summary: build time (Verilator and the
    C++ compile, everything but the tests) and run time (the tests' own, from cocotb's results.xml)."""
    out = (Path(out) if out is not None else GATESIM_ROOT / block).resolve()   # cocotb runs in it: no relative paths
    module = test_module(block)
    netlist = read_synth(Path(synth_dir))
    try:
        models = ensure_models(Path(cell_models)) if liberty is None else generate(liberty, Path(cell_models))
    except (PdkError, CellModelError) as e:
        raise GateSimError(str(e)) from None
    srcs = sources(netlist, models)
    link_rtl(netlist.rtl_dir, out)
    check_rom_files(netlist, out)
    extra_env = {CONFIG_ENV: str((netlist.rtl_dir / "config.json").resolve()), **(env or {})}
    t0 = time.monotonic()
    args = [*NETLIST_WAIVERS, *(QUICK_BUILD if quick_build else ()), *build_args]
    result = run_cocotb(f"gatesim-{block}", srcs, netlist.top, module, build_args=args,
                        extra_env=extra_env, build_dir=out, testcase=testcase, test_args=list(test_args))
    total = time.monotonic() - t0
    run_s = sum(float(t.get("time", 0)) for t in ET.parse(result.results_xml).getroot().iter("testcase"))
    summary = {"block": block, "top": netlist.top, "netlist": str(netlist.verilog),
               "cells": sum(n for t, n in netlist.cell_types.items() if t not in MACRO_MODELS),
               "macros": {t: n for t, n in netlist.cell_types.items() if t in MACRO_MODELS},
               "cell_models": str(models.verilog), "tests": result.n_tests, "failed": result.n_failed,
               "passed": result.passed, "build_s": round(total - run_s, 1), "run_s": round(run_s, 1),
               "log": str(result.log), "env": extra_env}
    (out / "gatesim.json").write_text(json.dumps(summary, indent=1) + "\n")
    return result, summary


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m verification.gatesim", description=__doc__.split("\n\n")[0])
    ap.add_argument("--synth", type=Path, required=True, help="flow.synth output folder (synth.json, netlist)")
    ap.add_argument("--block", required=True, help="block whose testbench runs (verification/test_<block>.py)")
    ap.add_argument("--out", type=Path, help="build and run folder (default build/gatesim/<block>)")
    ap.add_argument("--cell-models", type=Path, default=CELL_MODELS_OUT, help="where the cell models are kept")
    ap.add_argument("--liberty", type=Path, help="liberty to model the cells from (default: the PDK's typical)")
    ap.add_argument("--testcase", help="one cocotb test of the module (default: all)")
    ap.add_argument("--quick-build", action="store_true", help="compile the simulator without optimisation "
                    "(much faster to build, slower to run: for short runs)")
    ap.add_argument("--env", action="append", default=[], metavar="KEY=VALUE",
                    help="environment for the testbench, e.g. NANO_K3_DMAC_CASES=200")
    args = ap.parse_args(argv)
    bad = [e for e in args.env if "=" not in e]
    if bad:
        ap.error(f"--env takes KEY=VALUE, got {bad}")
    try:
        _, s = gatesim(args.synth, args.block, args.out, args.cell_models, args.testcase,
                       dict(e.split("=", 1) for e in args.env), args.liberty, args.quick_build)
    except (GateSimError, SimFailure) as e:
        print(f"verification.gatesim: {e}", file=sys.stderr)
        return 1
    print(f"{s['block']}: netlist {s['netlist']} ({s['cells']} cells) with {s['cell_models']}: "
          f"{s['tests']} cocotb tests passed; Verilator build {s['build_s']} s, run {s['run_s']} s ({s['log']})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
