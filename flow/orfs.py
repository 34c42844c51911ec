"""An OpenROAD-flow-scripts (ORFS) design for the synthesised chip, and a way to run it.

    python -m flow.orfs --synth build/synth --rtl build/rtl --out build/orfs [--run] [--runner auto]

Writes ``<out>/designs/nangate45/<top>/``:

* ``config.mk``: only what differs from the nangate45 platform defaults (design name, sources, SDC,
  the fakeram45 LEF/LIB files used, die and core area, placement density, macro halo, and
  ``SYNTH_MEMORY_MAX_BITS`` when a ROM table is larger than ORFS's default allows);
* ``constraint.sdc``: the constraints of ``flow/sta.py`` (10 ns clock on ``clk``, 20 % I/O delays);
* ``src/``: a copy of the RTL files of the file list (ORFS synthesises the RTL itself) and
  ``msh_macros.v`` (``flow/orfs_storage.py``): an ``msh_sram`` that maps each used DEPTH x WIDTH onto
  fakeram45 macros or, when they take less area, flip-flops (the mapping of ``flow/macro_map.py``), and an
  ``msh_rom`` that turns each table into logic (a case statement generated from its hex file; fakeram45
  has no ROM);
* ``floorplan.json``: how the die was sized (cell area, utilization, macro footprints, a packing that
  proves every macro fits in the core).

The PDK is never copied: ``config.mk`` names the fakeram45 files as ``$(NK3_FAKERAM_DIR)/lef/...``,
which is ORFS's own ``$(PLATFORM_DIR)`` unless the run passes the mounted ``$NANGATE45_PDK``.

``--run`` runs ``make`` of ORFS on it: in a local checkout when ``FLOW_HOME`` is set (the ``flow``
folder of ORFS), else in the ``openroad/orfs`` container with docker or podman (when an engine
answers). The ORFS work folders (logs/, reports/, results/, objects/) go under ``<out>``; the metrics
ORFS writes are parsed into ``<out>/orfs.json`` (``flow/orfs_metrics.py``).

The fakeram45 macros have one read/write port, ``msh_sram`` a read and a write port: the wrapper gives
the write priority and drops a read issued in the same cycle (see ``SRAM_WRAPPER_NOTE`` in
flow/orfs_storage.py and docs/pnr.md). Area, timing and wirelength of the placed-and-routed design are
meaningful; the wrapped chip is functionally equal to the RTL only if it never reads and writes one
macro-mapped msh_sram in the same cycle. The flip-flop arrays behave exactly like the SPEC model.
``make sim MACROS=physical`` (verification/physical_macros.py) simulates the chip with this msh_macros.v.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

from flow.macro_map import MacroMapError, storage_lib, wrapper_area_um2
from flow.orfs_metrics import MetricsError, collect_metrics, summary_text
from flow.orfs_storage import (ORFS_SYNTH_MEMORY_MAX_BITS, SRAM_WRAPPER_NOTE, OrfsError, Rom, _addrw, design_storage,
                               sram_module_name, synth_memory_max_bits)
from flow.sta import DRIVING_CELL, IO_DELAY_FRACTION, OUTPUT_LOAD_FF
from flow.synth import SynthError, design_period_ns, load_rtl
from pdk_config import PdkError, find_pdk, pdk_from_env

REPO = Path(__file__).resolve().parent.parent
PLATFORM = "nangate45"
FLOW_VARIANT = "base"
CLOCK = "clk"
DEFAULT_IMAGE = "openroad/orfs:latest"
CONTAINER_FLOW = "/OpenROAD-flow-scripts/flow"

# Floorplan. Nangate45 rows: site 0.19 x 1.4 um; the die margin is the one of ORFS's nangate45 macro
# designs (bp_fe_top: CORE_AREA 10.07 11.2 ...), room for the power grid's edge.
SITE_W, SITE_H = 0.19, 1.4
MARGIN_X, MARGIN_Y = 53 * SITE_W, 8 * SITE_H
# ORFS's MACRO_PLACE_HALO: no standard cell closer than this to a macro in the ORFS flow (wider than the
# keep-out ring of this repository's own placer, flow/macro_map.py MACRO_KEEPOUT_UM).
ORFS_MACRO_HALO_UM = 10.0
STD_UTILIZATION = 0.45             # standard-cell area / the core area left beside the macros
PLACE_DENSITY_LB_ADDON = 0.20      # ORFS: density = its computed lower bound + this
PIN_PITCH_UM = 0.8                 # perimeter per I/O pin the die must offer (pins on metal 3/4 with spacing)
# Estimated standard-cell area per ROM bit: a case-statement table after ABC is a few gates per
# output bit per address bit; this is an estimate for sizing the die only (ORFS reports the real area).
ROM_UM2_PER_BIT = 1.0


def progress(msg: str) -> None:
    print(f"[orfs] {msg}", file=sys.stderr, flush=True)


def _snap(x: float, grid: float) -> float:
    return round(math.ceil(x / grid - 1e-9) * grid, 3)


# ---------------------------------------------------------------------------------------------- floorplan

def shelf_pack(boxes: list[tuple[str, float, float]], width: float) -> tuple[list[dict], float]:
    """Boxes (name, w, h) packed in rows of ``width``, tallest first: placements and the height used."""
    placed, x, y, shelf_h = [], 0.0, 0.0, 0.0
    for name, w, h in sorted(boxes, key=lambda b: (-b[2], -b[1], b[0])):
        if w > width:
            return [], math.inf
        if x + w > width:
            x, y, shelf_h = 0.0, y + shelf_h, 0.0
        placed.append({"name": name, "x": round(x, 3), "y": round(y, 3), "w": round(w, 3), "h": round(h, 3)})
        x, shelf_h = x + w, max(shelf_h, h)
    return placed, y + shelf_h


def floorplan(std_area: float, macros: list[tuple[str, float, float]], n_io: int) -> dict:
    """A square core that holds the macros (with halo, in a shelf packing) and std_area at STD_UTILIZATION."""
    halo_boxes = [(n, w + 2 * ORFS_MACRO_HALO_UM, h + 2 * ORFS_MACRO_HALO_UM) for n, w, h in macros]
    halo_area = sum(w * h for _, w, h in halo_boxes)
    need = std_area / STD_UTILIZATION
    side = max(math.sqrt(need + halo_area), n_io * PIN_PITCH_UM / 4, 20.0)
    while True:
        core_w, core_h = _snap(side, SITE_W), _snap(side, SITE_H)
        placed, used_h = shelf_pack(halo_boxes, core_w)
        if used_h <= core_h and core_w * core_h - halo_area >= need:
            break
        side *= 1.02
    die_w, die_h = round(core_w + 2 * MARGIN_X, 3), round(core_h + 2 * MARGIN_Y, 3)
    return {
        "std_cell_area_um2": round(std_area, 3), "std_utilization": STD_UTILIZATION,
        "macro_halo_um": ORFS_MACRO_HALO_UM, "macro_area_um2": round(sum(w * h for _, w, h in macros), 3),
        "macro_area_with_halo_um2": round(halo_area, 3), "io_bits": n_io,
        "core": [round(MARGIN_X, 3), round(MARGIN_Y, 3), round(MARGIN_X + core_w, 3), round(MARGIN_Y + core_h, 3)],
        "die": [0, 0, die_w, die_h], "core_area_um2": round(core_w * core_h, 3), "die_area_um2": round(die_w * die_h, 3),
        "packing": {"note": "a legal macro placement (halo included) proving the macros fit; "
                            "ORFS's macro placer chooses its own", "height_um": round(used_h, 3), "boxes": placed},
    }


def top_io_bits(netlist: Path, top: str) -> int:
    """Input + output bits of the top module of a Yosys netlist."""
    text = netlist.read_text()
    m = re.search(rf"^module\s+\\?{re.escape(top)}\s*\(.*?^endmodule", text, re.S | re.M)
    if not m:
        raise OrfsError(f"module {top} not found in {netlist}")
    bits = 0
    for d in re.finditer(r"^\s*(?:input|output|inout)\s*(?:wire\s*)?(?:\[(\d+):(\d+)\])?\s*([^;]+);", m.group(0), re.M):
        n = len([x for x in d.group(3).split(",") if x.strip()])
        bits += n * ((abs(int(d.group(1)) - int(d.group(2))) + 1) if d.group(1) else 1)
    return bits


# ---------------------------------------------------------------------------------------------- design

def sdc_text(top: str, period_ns: float) -> str:
    io = round(IO_DELAY_FRACTION * period_ns, 4)
    return f"""\
# generated by flow/orfs.py: the constraints of flow/sta.py (SPEC section 9)
current_design {top}
create_clock -name {CLOCK} -period {period_ns} [get_ports {{{CLOCK}}}]
set nk3_inputs [delete_from_list [all_inputs] [get_ports {{{CLOCK}}}]]
set_input_delay {io} -clock {CLOCK} $nk3_inputs
set_output_delay {io} -clock {CLOCK} [all_outputs]
set_driving_cell -lib_cell {DRIVING_CELL[0]} -pin {DRIVING_CELL[1]} $nk3_inputs
set_load {OUTPUT_LOAD_FF} [all_outputs]
"""


def _mk_list(var: str, items: list[str]) -> str:
    if not items:
        return f"export {var} ="
    return f"export {var} = " + " \\\n    ".join(items)


def config_mk(top: str, src_files: list[str], incdirs: list[str], defines: list[str], rams: list[str],
              fp: dict, hierarchical: bool, origin: str, memory_max: tuple[int, Rom] | None = None) -> str:
    core, die = fp["core"], fp["die"]
    lines = [
        f"# generated by flow/orfs.py from {origin}; regenerate, do not edit.",
        "# Only what differs from the nangate45 platform defaults. NK3_FAKERAM_DIR is ORFS's own platform",
        "# folder unless the run passes the PDK ($NANGATE45_PDK, mounted at /nk3/pdk in the container).",
        "export NK3_DESIGN_DIR := $(patsubst %/,%,$(dir $(abspath $(lastword $(MAKEFILE_LIST)))))",
        "export NK3_FAKERAM_DIR ?= $(PLATFORM_DIR)",
        "",
        f"export DESIGN_NAME = {top}",
        f"export PLATFORM    = {PLATFORM}",
        "",
        _mk_list("VERILOG_FILES", [f"$(NK3_DESIGN_DIR)/src/{f}" for f in src_files]),
    ]
    if incdirs:
        lines.append(_mk_list("VERILOG_INCLUDE_DIRS", [f"$(NK3_DESIGN_DIR)/src/{d}" for d in incdirs]))
    if defines:
        lines.append("export VERILOG_DEFINES = " + " ".join(f"-D{d}" for d in defines))
    lines += ["export SDC_FILE = $(NK3_DESIGN_DIR)/constraint.sdc", ""]
    if rams:
        lines += [_mk_list("ADDITIONAL_LEFS", [f"$(NK3_FAKERAM_DIR)/lef/{r}.lef" for r in rams]),
                  _mk_list("ADDITIONAL_LIBS", [f"$(NK3_FAKERAM_DIR)/lib/{r}.lib" for r in rams]), ""]
    lines += [
        f"# Sized by flow/orfs.py (floorplan.json): {fp['std_cell_area_um2']:.0f} um2 of cells at "
        f"{fp['std_utilization']:.0%}" + (f" beside {fp['macro_area_um2']:.0f} um2 of macros (+{ORFS_MACRO_HALO_UM:g} um halo)."
                                          if rams else ", no macros."),
        f"export DIE_AREA  = {die[0]} {die[1]} {die[2]} {die[3]}",
        f"export CORE_AREA = {core[0]} {core[1]} {core[2]} {core[3]}",
        f"export PLACE_DENSITY_LB_ADDON = {PLACE_DENSITY_LB_ADDON}",
    ]
    if rams:
        lines.append(f"export MACRO_PLACE_HALO = {ORFS_MACRO_HALO_UM:g} {ORFS_MACRO_HALO_UM:g}")
    if hierarchical:
        lines.append("# Keep the module hierarchy so the macro placer can group macros with their logic.")
        lines.append("export SYNTH_HIERARCHICAL = 1")
    if memory_max:
        bits, rom = memory_max
        lines += ["# Yosys turns each msh_rom case table into a ROM of 2^ADDRW x WIDTH bits before mapping it to gates;",
                  f"# the largest, {rom.module} ({1 << _addrw(rom.depth)} x {rom.width}), is over ORFS's default "
                  f"of {ORFS_SYNTH_MEMORY_MAX_BITS}.",
                  f"export SYNTH_MEMORY_MAX_BITS = {bits}"]
    return "\n".join(lines) + "\n"


def _copy_sources(files: list[Path], incdirs: list[Path], dst: Path) -> tuple[list[str], list[str]]:
    names, seen = [], {}
    for f in files:
        if f.name in seen and seen[f.name] != f:
            raise OrfsError(f"two RTL files named {f.name}: {seen[f.name]} and {f}")
        seen[f.name] = f
        shutil.copy2(f, dst / f.name)
        names.append(f.name)
    inc = []
    for i, d in enumerate(incdirs):
        name = f"include{i}"
        shutil.copytree(d, dst / name)
        inc.append(name)
    return names, inc


def generate(synth_dir: Path, rtl_dir: Path, out: Path, period_ns: float | None = None) -> dict:
    """Write the ORFS design folder; returns the description that is also written to ``<out>/design.json``."""
    sj = synth_dir / "synth.json"
    if not sj.is_file():
        raise OrfsError(f"{sj} not found: run `make synth` (python -m flow.synth) first")
    synth = json.loads(sj.read_text())
    top = synth["top"]
    period_ns = design_period_ns(period_ns, synth, OrfsError)      # None: the RTL's clock
    try:
        rtl = load_rtl(rtl_dir, top)
        pdk = find_pdk()
    except (SynthError, PdkError) as e:
        raise OrfsError(str(e)) from None
    if rtl.config_sha256 != synth["rtl"]["config_sha256"]:
        raise OrfsError(f"{rtl_dir}/config.json differs from the one {sj} was synthesised from; run `make synth` again")
    try:
        lib = storage_lib(pdk, REPO / "build" / "pdk_cache")
        storage = design_storage(synth["macros"]["instances"], rtl.rtl_dir, lib)
    except MacroMapError as e:
        raise OrfsError(str(e)) from None
    mappings, srams, flops, shapes, roms = storage.mappings, storage.srams, storage.flops, storage.shapes, storage.roms

    # Area the die must hold: the synthesised logic, the wrappers' registers and muxes, the flip-flop
    # arrays, the ROM tables.
    wrapper_area = sum(wrapper_area_um2(m.width, m.rows, lib) for m in srams)
    flop_area = sum(m.flop_um2 for m in flops)
    rom_area = sum(r.depth * r.width for r in roms) * ROM_UM2_PER_BIT
    std_area = synth["area"]["logic_um2"] + wrapper_area + flop_area + rom_area
    macro_boxes = [(f"{m.path}.mem_r{r}_c{c}", m.macro.width_um, m.macro.height_um)
                   for m in srams for r in range(m.rows) for c in range(m.cols)]
    n_io = top_io_bits(synth_dir / synth["files"]["netlist"], top)
    fp = floorplan(std_area, macro_boxes, n_io)
    fp["std_cell_area_parts_um2"] = {"synthesised_logic": synth["area"]["logic_um2"],
                                     "sram_wrappers_estimate": round(wrapper_area, 3),
                                     "sram_flops_estimate": round(flop_area, 3),
                                     "rom_logic_estimate": round(rom_area, 3)}

    design = out / "designs" / PLATFORM / top
    stage = design.with_name(design.name + ".tmp")
    if stage.exists():
        shutil.rmtree(stage)
    (stage / "src").mkdir(parents=True)
    src_names, inc_names = _copy_sources(list(rtl.files), list(rtl.include_dirs), stage / "src")
    (stage / "src" / "msh_macros.v").write_text(storage.verilog())
    rams = storage.fakerams
    memory_max = synth_memory_max_bits(list(roms))
    (stage / "config.mk").write_text(config_mk(top, src_names + ["msh_macros.v"], inc_names, list(rtl.defines),
                                               rams, fp, hierarchical=bool(rams), origin=str(sj),
                                               memory_max=memory_max))
    (stage / "constraint.sdc").write_text(sdc_text(top, period_ns))
    (stage / "floorplan.json").write_text(json.dumps(fp, indent=1) + "\n")
    if design.exists():
        shutil.rmtree(design)
    stage.rename(design)

    desc = {
        "schema": "nano-k3/orfs-design/1", "top": top, "platform": PLATFORM, "period_ns": period_ns,
        "design_dir": str(design), "config": str(design / "config.mk"), "sdc": str(design / "constraint.sdc"),
        "synth": str(sj), "rtl_config_sha256": rtl.config_sha256,
        "fakerams": {r: {"lef": str(next(f.lef for f in pdk.fakerams if f.name == r)),
                         "lib": str(next(f.lib for f in pdk.fakerams if f.name == r))} for r in rams},
        "mappings": [m.as_dict() for m in mappings],
        "wrappers": {f"{d}x{w}": sram_module_name(d, w) for d, w in shapes},
        "srams_as_flops": [m.path for m in flops],
        "synth_memory_max_bits": ({"value": memory_max[0], "rom": memory_max[1].module} if memory_max
                                  else {"value": None, "default": ORFS_SYNTH_MEMORY_MAX_BITS}),
        "roms": [{"init_file": r.init_file, "source": str(r.source), "module": r.module,
                  "depth": r.depth, "width": r.width} for r in roms],
        "floorplan": fp, "sram_wrapper_note": SRAM_WRAPPER_NOTE,
    }
    (out / "design.json").write_text(json.dumps(desc, indent=1) + "\n")
    return desc


# ---------------------------------------------------------------------------------------------- running

INSTALL_HINT = (
    "Install one of: (a) a container engine that answers `docker info` (Docker Engine, or podman) and "
    f"`docker pull {DEFAULT_IMAGE}`; or (b) a local OpenROAD-flow-scripts: "
    "`git clone --recursive https://github.com/The-OpenROAD-Project/OpenROAD-flow-scripts`, build it "
    "(./build_openroad.sh --local) and set FLOW_HOME=<checkout>/flow.")


def _engine_answers(exe: str) -> tuple[bool, str]:
    try:
        p = subprocess.run([exe, "info"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as e:
        return False, str(e)
    msg = (p.stderr or p.stdout).strip().splitlines()
    return p.returncode == 0, (msg[-1] if msg else f"exit {p.returncode}")


def pick_runner(choice: str = "auto") -> tuple[str, str]:
    """(runner, detail): "local" with FLOW_HOME, or "docker"/"podman" when its engine answers."""
    tried = []
    if choice in ("auto", "local"):
        fh = os.environ.get("FLOW_HOME")
        if fh and (Path(fh) / "Makefile").is_file():
            return "local", fh
        tried.append(f"FLOW_HOME={fh} has no Makefile" if fh else "FLOW_HOME is not set")
    for exe in ("docker", "podman"):
        if choice not in ("auto", exe):
            continue
        path = shutil.which(exe)
        if not path:
            tried.append(f"{exe}: not installed")
            continue
        ok, msg = _engine_answers(path)
        if ok:
            return exe, path
        tried.append(f"{exe} at {path}: `{exe} info` fails, no engine answers ({msg})")
    raise OrfsError("cannot run ORFS here: " + "; ".join(tried) + ". " + INSTALL_HINT)


def run_command(runner: str, detail: str, out: Path, top: str, image: str, targets: list[str]) -> list[str]:
    pdk = pdk_from_env()
    if runner == "local":
        cmd = ["make", "-C", detail, f"DESIGN_CONFIG={(out / 'designs' / PLATFORM / top / 'config.mk').resolve()}",
               f"WORK_HOME={out.resolve()}", f"FLOW_VARIANT={FLOW_VARIANT}"]
        if pdk:
            cmd.append(f"NK3_FAKERAM_DIR={pdk}")
        return cmd + targets
    mounts = ["-v", f"{out.resolve()}:/nk3/orfs"]
    make = [f"DESIGN_CONFIG=/nk3/orfs/designs/{PLATFORM}/{top}/config.mk", "WORK_HOME=/nk3/orfs",
            f"FLOW_VARIANT={FLOW_VARIANT}"]
    if pdk:
        mounts += ["-v", f"{pdk}:/nk3/pdk:ro"]
        make.append("NK3_FAKERAM_DIR=/nk3/pdk")
    script = f"cd /OpenROAD-flow-scripts && source ./env.sh && make -C {CONTAINER_FLOW} " + " ".join(make + targets)
    return [detail, "run", "--rm", "-u", f"{os.getuid()}:{os.getgid()}", *mounts, image, "bash", "-c", script]


def run(out: Path, top: str, runner_choice: str, image: str, targets: list[str]) -> int:
    runner, detail = pick_runner(runner_choice)
    cmd = run_command(runner, detail, out, top, image, targets)
    log = out / "orfs.log"
    progress(f"running ORFS ({runner}); log {log}\n  " + " ".join(cmd))
    with open(log, "w") as f:
        f.write("$ " + " ".join(cmd) + "\n")
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1)
        for line in proc.stdout:
            sys.stdout.write(line)
            f.write(line)
        return proc.wait()


# ---------------------------------------------------------------------------------------------- driver

def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m flow.orfs", description=__doc__.split("\n\n")[0])
    ap.add_argument("--synth", type=Path, default=Path("build/synth"), help="folder with synth.json")
    ap.add_argument("--rtl", type=Path, default=Path("build/rtl"), help="folder with config.json + file list")
    ap.add_argument("--out", type=Path, default=Path("build/orfs"))
    ap.add_argument("--period", type=float, help="clock period, ns (default: the RTL's, params.clock_ns of its "
                                                 "config.json)")
    ap.add_argument("--run", action="store_true", help="run ORFS on the design and parse its metrics")
    ap.add_argument("--runner", choices=("auto", "local", "docker", "podman"), default="auto",
                    help="auto: FLOW_HOME if set, else docker, else podman")
    ap.add_argument("--image", default=DEFAULT_IMAGE, help="container image (default %(default)s)")
    ap.add_argument("--targets", nargs="*", default=["finish"], help="make targets (default: finish)")
    ap.add_argument("--metrics-only", action="store_true", help="only parse the metrics of an earlier run")
    args = ap.parse_args(argv)
    try:
        args.out.mkdir(parents=True, exist_ok=True)
        if not args.metrics_only:
            desc = generate(args.synth, args.rtl, args.out, args.period)
            fp = desc["floorplan"]
            print(f"wrote {desc['design_dir']}: config.mk, constraint.sdc, src/ ({len(desc['mappings'])} storage "
                  f"instances, fakeram45 {sorted(desc['fakerams']) or 'none'}), die {fp['die'][2]} x {fp['die'][3]} um")
        top = json.loads((args.synth / "synth.json").read_text())["top"]
        if args.run:
            rc = run(args.out, top, args.runner, args.image, args.targets)
            if rc != 0:
                raise OrfsError(f"ORFS make exited with {rc}; see {args.out / 'orfs.log'}")
        if args.run or args.metrics_only:
            result = collect_metrics(args.out, PLATFORM, top, FLOW_VARIANT)
            (args.out / "orfs.json").write_text(json.dumps(result, indent=1) + "\n")
            print(summary_text(result), end="")
            print(f"wrote {args.out / 'orfs.json'}")
    except (OrfsError, MetricsError) as e:
        print(f"flow.orfs: error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
