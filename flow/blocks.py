"""`make blocks`: every engine of the chip through emit, synthesis, timing and its tests, in one table.

    python -m flow.blocks [--blocks dequant_mac mem_engine ...] [--out build/blocks] [--no-tests]

For each block of the rtl_gen registry: emit its Verilog, synthesize it (``flow.synth``), time it at
10 ns on the typical and slow corners (``flow.sta``), and run its cocotb test file
(``verification/test_<block>.py``) under pytest. Prints one table and writes ``blocks.json``:
cells, area (um^2), SRAM and ROM bits, worst slack per corner, and test status.
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

from pdk_config import pdk_from_env
from rtl_gen.emit import BLOCKS

REPO = Path(__file__).resolve().parent.parent
CORNERS = ("typical", "slow")
ENGINES = sorted(b for b in BLOCKS if b != "chip")   # the chip itself is `make synth sta`


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
        ("rtl", [sys.executable, "-m", "rtl_gen", "--block", block, "--out", str(out / "rtl")]),
        ("synth", [sys.executable, "-m", "flow.synth", "--rtl", str(out / "rtl"), "--out", str(out / "synth")]),
        ("sta", [sys.executable, "-m", "flow.sta", "--synth", str(out / "synth"), "--out", str(out / "sta"),
                 "--corners", *CORNERS]),
    ]
    for name, cmd in steps:
        t0 = time.monotonic()
        if not _run(cmd, out / f"{name}.log"):
            row["error"] = f"{name} failed, see {_shown(out / f'{name}.log')}"
            break
        print(f"  {block}: {name} done in {time.monotonic() - t0:.0f} s", flush=True)
    if "error" not in row:
        synth = json.loads((out / "synth" / "synth.json").read_text())
        sta = json.loads((out / "sta" / "sta.json").read_text())
        inst = synth["macros"]["instances"]
        row.update({
            "cells": synth["cells"]["count"],
            "area_um2": synth["area"]["logic_um2"],
            "sram_bits": sum(m["bits"] for m in inst if m["type"] == "msh_sram"),
            "rom_bits": sum(m["bits"] for m in inst if m["type"] == "msh_rom"),
            "wns_ns": {c: sta["corners"][c]["wns_ns"] for c in CORNERS},
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
        t = r.get("tests", {})
        tests = t.get("status", "not run")
        if "tests" in t:
            tests += f" ({t['tests'] - t['failures'] - t['errors'] - t['skipped']}/{t['tests']})"
        lines.append(f"{r['block']:14} {r['cells']:8,} {r['area_um2']:11,.0f} {r['sram_bits']:10,} "
                     f"{r['rom_bits']:9,} " + " ".join(f"{r['wns_ns'][c]:12.3f}" for c in CORNERS) + f"  {tests}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m flow.blocks", description=__doc__.splitlines()[0])
    ap.add_argument("--blocks", nargs="+", default=ENGINES, help=f"default: the engines {ENGINES}")
    ap.add_argument("--out", type=Path, default=Path("build/blocks"))
    ap.add_argument("--no-tests", action="store_true", help="skip the cocotb test runs")
    args = ap.parse_args(argv)
    args.out = args.out.resolve()
    pdk_from_env()   # a relative $NANGATE45_PDK made absolute here: the steps run with cwd=REPO
    unknown = sorted(set(args.blocks) - set(BLOCKS))
    if unknown:
        ap.error(f"unknown blocks {unknown}; valid: {sorted(BLOCKS)}")
    rows = []
    for block in args.blocks:
        print(f"{block}:", flush=True)
        rows.append(run_block(block, args.out / block, not args.no_tests))
    text = table(rows)
    print(text)
    args.out.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=args.out, suffix=".json")
    with os.fdopen(fd, "w") as f:
        json.dump({"schema": 1, "corners": list(CORNERS), "period_ns": 10.0, "blocks": rows,
                   "command": "python -m flow.blocks --blocks " + " ".join(args.blocks)}, f, indent=2)
    os.replace(tmp, args.out / "blocks.json")
    (args.out / "blocks.txt").write_text(text + "\n")
    failed = [r["block"] for r in rows if "error" in r or r.get("tests", {}).get("status", "pass") != "pass"
              and r.get("tests", {}).get("status") != "no test file"]
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
