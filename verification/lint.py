"""``make lint``: SPEC_NANO_KPU.md §7's lint gate, run exactly as an outside evaluator runs it.

    python -m verification.lint [--rtl build/rtl]

From the folder that holds the RTL folder as ``rtl/`` (a symlink ``<work>/rtl`` when the folder has
another name), with the SPEC macro models beside it and no waivers of any kind::

    verilator --lint-only -Wall -Wno-fatal --top-module <top> msh_sram.v msh_rom.v -f rtl/filelist.f

Prints the command, the warnings per rule and the verdict; exits 1 on any error or on more than
``MAX_WARNINGS`` warnings.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from hw.roms import RTL_DIR
from rtl_gen.emit import CONFIG_NAME, FILELIST_NAME, read_config
from verification.runner import MODELS, SIM_ROOT, LintResult, link_rtl, lint

MAX_WARNINGS = 40          # SPEC §7: zero errors, at most 40 warnings
MACRO_MODELS = (MODELS / "msh_sram.v", MODELS / "msh_rom.v")


def spec_lint(rtl_dir: Path | str, work_dir: Path | str | None = None) -> tuple[LintResult, str]:
    """Lint the emitted folder ``rtl_dir`` as SPEC §7 does; returns the result and the command line."""
    rtl_dir = Path(rtl_dir)
    cfg, _ = read_config(rtl_dir / CONFIG_NAME)
    top = cfg["top"]
    rtl = Path(rtl_dir).resolve()
    work = Path(work_dir) if work_dir is not None else (
        rtl.parent if rtl.name == RTL_DIR else SIM_ROOT / "lint" / f"spec-{top}")
    link_rtl(rtl, work)
    args = ["-f", f"{RTL_DIR}/{FILELIST_NAME}"]
    command = (f"(cd {work} && verilator --lint-only -Wall -Wno-fatal --top-module {top} "
               f"{' '.join(map(str, MACRO_MODELS))} {' '.join(args)})")
    return lint(MACRO_MODELS, top, extra_args=args, cwd=work), command


def passes(result: LintResult) -> bool:
    return result.errors == 0 and result.warnings <= MAX_WARNINGS


# A block's Verilog (no waivers either): within the SPEC's count, and only the two rules a hierarchical
# emission keeps visible: DECLFILENAME (submodules "<top>.<sub>" share the top's file) and UNUSEDSIGNAL
# (bits a generator names and never reads; rtl_gen.lint_clean sinks every other unread bit).
BLOCK_RULES = {"Warning-DECLFILENAME", "Warning-UNUSEDSIGNAL"}


def block_passes(result: LintResult) -> bool:
    return passes(result) and set(result.by_rule) <= BLOCK_RULES


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m verification.lint", description=__doc__.split("\n\n")[0])
    ap.add_argument("--rtl", default="build/rtl", help="the folder `make rtl` wrote (default build/rtl)")
    args = ap.parse_args(argv)
    if not (Path(args.rtl) / CONFIG_NAME).is_file():
        ap.error(f"{Path(args.rtl) / CONFIG_NAME} not found: run `make rtl` first")
    result, command = spec_lint(args.rtl)
    print(f"lint: {command}")
    for rule, n in sorted(result.by_rule.items(), key=lambda kv: -kv[1]):
        print(f"lint:   {n:6d}  {rule}")
    ok = passes(result)
    print(f"lint: {result.errors} errors, {result.warnings} warnings (SPEC §7 allows 0 and {MAX_WARNINGS}): "
          f"{'PASS' if ok else 'FAIL'}")
    if not ok:
        print("\n".join(ln for ln in result.output.splitlines() if ln.startswith("%")), file=sys.stderr)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
