"""Issue 16's readability bound on the hardware generators: no file in hw/ over 500 lines, no function
over 150 (an engine's elaborate composes named parts instead)."""
from __future__ import annotations

import ast
from pathlib import Path

HW = Path(__file__).resolve().parents[1] / "hw"
MAX_FILE_LINES, MAX_FUNCTION_LINES = 500, 150


def test_hw_files_and_functions_are_short():
    too_long = []
    for path in sorted(HW.rglob("*.py")):
        src = path.read_text()
        lines = src.count("\n")
        if lines > MAX_FILE_LINES:
            too_long.append(f"{path.relative_to(HW.parent)}: {lines} lines")
        for node in ast.walk(ast.parse(src)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                n = node.end_lineno - node.lineno + 1
                if n > MAX_FUNCTION_LINES:
                    too_long.append(f"{path.relative_to(HW.parent)}:{node.lineno} {node.name}: {n} lines")
    assert not too_long, "over the bound: " + "; ".join(too_long)
