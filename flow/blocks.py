"""`make blocks`: every engine of the chip through emit, synthesis, timing and its tests, in one table.

    python -m flow.blocks [--blocks dequant_mac mem_engine ...] [--out build/blocks] [--no-tests]

For each block of the rtl_gen registry: emit its Verilog from the current source, synthesize it
(``flow.synth``), time it at the chip's clock (``PERIOD_NS``) on the typical and slow corners (``flow.sta``),
and run its cocotb test file (``verification/test_<block>.py``) under pytest. Prints one table and writes
``blocks.json``, the same table as text (``blocks.txt``) and as Markdown (``blocks.md``, what the README points
to): cells, area (um^2), SRAM and ROM bits, worst slack per corner, test status, and the emitted RTL's parameter hash and
Verilog sha256, so a row says which RTL it measured. Every row of a table comes from one run; a run of
some blocks (``--blocks``) writes a table of those only. The PDK is checked before any block starts.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from pathlib import Path

from pdk_config import PdkError, find_pdk, pdk_from_env
from hw.params import preset
from rtl_gen.emit import BLOCKS

REPO = Path(__file__).resolve().parent.parent
CORNERS = ("typical", "slow")
PRESET = "nano"                         # the chip build whose blocks are emitted
PERIOD_NS = preset(PRESET).clock_ns     # its clock (hw.params.ChipParams.clock_ns), the STA step's period
ENGINES = sorted(b for b in BLOCKS if b != "chip")   # the chip itself is `make synth sta`


def emit_and_synthesise(blocks: list[str], preset_name: str, out: Path, purpose: str) -> dict[str, Path]:
    """Each engine of ``blocks`` emitted at ``preset_name`` into ``<out>/<block>/rtl`` (with the LUT ROMs its
    ``msh_rom`` instances read) and synthesised into ``<out>/<block>/synth``; returns block -> synthesis folder.
    A block that is not an engine raises ValueError naming the valid ones (``purpose`` says who asks)."""
    from flow.synth import synthesize
    from hw.roms import ROM_SUBDIR
    from nano_k3.luts import write_roms
    from rtl_gen import emit
    bad = [b for b in blocks if b not in ENGINES]
    if bad:
        raise ValueError(f"unknown or chip-level blocks {bad}: {purpose} runs per engine, one of {ENGINES}")
    params, out, folders = preset(preset_name), Path(out).resolve(), {}
    for b in blocks:
        print(f"{b}: emitting ({preset_name}) and synthesising ...", flush=True)
        emit(b, out / b / "rtl", params)
        write_roms(out / b / "rtl" / ROM_SUBDIR)
        synthesize(out / b / "rtl", out / b / "synth", jobs=1)
        folders[b] = out / b / "synth"
    return folders


def _run(cmd: list[str], log: Path) -> bool:
    with open(log, "w") as f:
        return subprocess.run(cmd, cwd=REPO, stdout=f, stderr=subprocess.STDOUT).returncode == 0


def _shown(path: Path) -> str:
    """A path as the table shows it: relative to the repository when inside it (``--out`` may be anywhere)."""
    path = path.resolve()
    return str(path.relative_to(REPO) if path.is_relative_to(REPO) else path)


def _tests(block: str, out: Path) -> dict:
    test_file = REPO / "verification" / f"test_{block}.py"
    if not test_file.exists():
        return {"status": "no test file", "file": str(test_file.relative_to(REPO))}
    xml = out / "pytest.xml"
    ok = _run([sys.executable, "-m", "pytest", "-q", str(test_file), f"--junitxml={xml}"], out / "pytest.log")
    root = ET.parse(xml).getroot() if xml.exists() else None
    suite = root if root is None or root.tag == "testsuite" else root.find("testsuite")
    counts = {k: int(suite.get(k, 0)) for k in ("tests", "failures", "errors", "skipped")} if suite is not None else {}
    status = "pass" if ok and counts.get("tests", 0) > 0 else "FAIL"
    return {"status": status, **counts, "log": _shown(out / "pytest.log")}


def run_block(block: str, out: Path, tests: bool) -> dict:
    out.mkdir(parents=True, exist_ok=True)
    row: dict = {"block": block}
    steps = [
        ("rtl", [sys.executable, "-m", "rtl_gen", "--block", block, "--preset", PRESET, "--out", str(out / "rtl")]),
        ("synth", [sys.executable, "-m", "flow.synth", "--rtl", str(out / "rtl"), "--out", str(out / "synth")]),
        ("sta", [sys.executable, "-m", "flow.sta", "--synth", str(out / "synth"), "--out", str(out / "sta"),
                 "--corners", *CORNERS, "--period", str(PERIOD_NS)]),
    ]
    for name, cmd in steps:
        t0 = time.monotonic()
        if not _run(cmd, out / f"{name}.log"):
            row["error"] = f"{name} failed, see {_shown(out / f'{name}.log')}"
            break
        print(f"  {block}: {name} done in {time.monotonic() - t0:.0f} s", flush=True)
    if "error" not in row:
        config = json.loads((out / "rtl" / "config.json").read_text())
        synth = json.loads((out / "synth" / "synth.json").read_text())
        sta = json.loads((out / "sta" / "sta.json").read_text())
        inst = synth["macros"]["instances"]
        row.update({
            "cells": synth["cells"]["count"],
            "area_um2": synth["area"]["logic_um2"],
            "sram_bits": sum(m["bits"] for m in inst if m["type"] == "msh_sram"),
            "rom_bits": sum(m["bits"] for m in inst if m["type"] == "msh_rom"),
            "wns_ns": {c: sta["corners"][c]["wns_ns"] for c in CORNERS},
            "rtl": {"params_hash": config.get("params_hash"), "verilog_sha256": config.get("verilog_sha256")},
        })
    if tests:
        row["tests"] = _tests(block, out)
        print(f"  {block}: tests {row['tests']['status']}", flush=True)
    return row


def table(rows: list[dict]) -> str:
    head = f"{'block':14} {'cells':>8} {'area um2':>11} {'SRAM bits':>10} {'ROM bits':>9} " \
           + " ".join(f"{'WNS ' + c:>12}" for c in CORNERS) + "  tests"
    lines = [head, "-" * len(head)]
    for r in rows:
        if "error" in r:
            lines.append(f"{r['block']:14} {r['error']}")
            continue
        tests = _tests_text(r.get("tests", {}))
        lines.append(f"{r['block']:14} {r['cells']:8,} {r['area_um2']:11,.0f} {r['sram_bits']:10,} "
                     f"{r['rom_bits']:9,} " + " ".join(f"{r['wns_ns'][c]:12.3f}" for c in CORNERS) + f"  {tests}")
    return "\n".join(lines)


def _tests_text(t: dict) -> str:
    text = t.get("status", "not run")
    if "tests" in t:
        text += f" ({t['tests'] - t['failures'] - t['errors'] - t['skipped']}/{t['tests']})"
    return text


def markdown(rows: list[dict], command: str) -> str:
    """The table as Markdown, headed by the command that measured every row of it."""
    head = ["block", "cells", "area µm²", "SRAM bits", "ROM bits", *(f"WNS {c} ns" for c in CORNERS), "tests",
            "RTL (params hash, Verilog sha256)"]
    lines = [f"Measured by `{command}` (one run; {PERIOD_NS:g} ns clock, Nangate45).", "",
             "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['block']} | {r['error']} |" + " |" * (len(head) - 2))
            continue
        rtl = r.get("rtl") or {}
        cells = [r["block"], f"{r['cells']:,}", f"{r['area_um2']:,.0f}", f"{r['sram_bits']:,}", f"{r['rom_bits']:,}",
                 *(f"{r['wns_ns'][c]:.3f}" for c in CORNERS), _tests_text(r.get("tests", {})),
                 f"{rtl.get('params_hash')}, {str(rtl.get('verilog_sha256'))[:12]}"]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m flow.blocks", description=__doc__.splitlines()[0])
    ap.add_argument("--blocks", nargs="+", default=ENGINES, help=f"default: the engines {ENGINES}")
    ap.add_argument("--out", type=Path, default=Path("build/blocks"))
    ap.add_argument("--no-tests", action="store_true", help="skip the cocotb test runs")
    args = ap.parse_args(argv)
    args.out = args.out.resolve()
    pdk_from_env()   # a relative $NANGATE45_PDK made absolute here: the steps run with cwd=REPO
    try:
        find_pdk()   # every block needs it for synthesis: stop before the first one, not in its log
    except PdkError as e:
        print(f"flow.blocks: error: {e}", file=sys.stderr)
        return 1
    unknown = sorted(set(args.blocks) - set(BLOCKS))
    if unknown:
        ap.error(f"unknown blocks {unknown}; valid: {sorted(BLOCKS)}")
    rows = []
    for block in args.blocks:
        print(f"{block}:", flush=True)
        rows.append(run_block(block, args.out / block, not args.no_tests))
    text = table(rows)
    command = "python -m flow.blocks --blocks " + " ".join(args.blocks)
    print(text)
    args.out.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=args.out, suffix=".json")
    with os.fdopen(fd, "w") as f:
        json.dump({"schema": 1, "corners": list(CORNERS), "period_ns": PERIOD_NS, "blocks": rows,
                   "command": command}, f, indent=2)
    os.replace(tmp, args.out / "blocks.json")
    (args.out / "blocks.txt").write_text(text + "\n")
    (args.out / "blocks.md").write_text(markdown(rows, command))
    failed = [r["block"] for r in rows if "error" in r or r.get("tests", {}).get("status", "pass") != "pass"
              and r.get("tests", {}).get("status") != "no test file"]
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
