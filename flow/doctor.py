"""`make doctor`: every tool with its version and path, the PDK and its files, and what to fix."""
from __future__ import annotations

import sys

from pdk_config import PdkError, find_pdk

from .toolchain import TOOLS, _vtuple, version


def main() -> int:
    problems: list[str] = []
    print(f"{'tool':16} {'version':18} {'needs':8} location")
    for tool in TOOLS:
        ver, where = version(tool)
        status = ""
        if ver is None and tool.optional:
            status = "missing (optional)"
            print(f"  note: {tool.name} is optional ({tool.optional}); install with: {tool.install}")
        elif ver is None:
            status = "MISSING"
            problems.append(f"{tool.name}: install with: {tool.install}")
        elif _vtuple(ver) < _vtuple(tool.minimum):
            status = "TOO OLD"
            problems.append(f"{tool.name} {ver} < {tool.minimum}: upgrade with: {tool.install}")
        print(f"{tool.name:16} {ver or '-':18} >={tool.minimum:6} {where or status}  {status if where else ''}")
    print()
    try:
        pdk = find_pdk()
    except PdkError as e:
        problems.append(str(e))
        print("PDK: NOT FOUND")
    else:
        print(f"PDK: {pdk.root} (found by {pdk.found_by})")
        for corner in pdk.corners:
            print(f"  liberty {corner:8} {pdk.liberty[corner]}")
        print(f"  tech LEF         {pdk.tech_lef}")
        print(f"  cell LEF         {pdk.cell_lef}")
        print(f"  cell GDS         {pdk.cell_gds or 'missing (needed by make place)'}")
        print(f"  KLayout tech     {pdk.klayout_lyt or 'missing (needed by make place)'}")
        print(f"  fakeram45 macros {len(pdk.fakerams)}: " + ", ".join(r.name[10:] for r in pdk.fakerams))
        missing = [c for c in ("slow", "fast") if c not in pdk.liberty]
        if missing:
            print(f"  note: corners {missing} have no liberty here; STA runs the others")
    print()
    if problems:
        print("To fix:")
        for p in problems:
            print(f"  - {p}")
        return 1
    print("All tools and the PDK are present.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
