"""``python -m rtl_gen --block dequant_mac --out build/rtl [--preset nano]``."""
from __future__ import annotations

import argparse
import sys

from hw.params import PRESETS, preset
from rtl_gen.emit import BLOCKS, emit


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m rtl_gen", description=__doc__)
    ap.add_argument("--block", required=True, help=f"one of: {', '.join(sorted(BLOCKS))}")
    ap.add_argument("--out", default="build/rtl", help="output folder (default build/rtl)")
    ap.add_argument("--preset", default="nano", help=f"chip preset, one of: {', '.join(sorted(PRESETS))}")
    args = ap.parse_args(argv)
    try:
        result = emit(args.block, args.out, preset(args.preset))
    except ValueError as e:
        ap.error(str(e))
    print(f"wrote {result.verilog}, {result.filelist}, {result.config} (top {result.top})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
