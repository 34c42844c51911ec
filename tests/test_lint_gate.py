"""SPEC §7's lint gate on the emitted chip, tiny and nano, run as ``make lint`` runs it (no waivers).

Each chip is emitted into a fresh folder named ``rtl``; ``verification.lint.spec_lint`` runs
``verilator --lint-only -Wall -Wno-fatal --top-module msh_chip_top <macro models> -f rtl/filelist.f``
from its parent. The gate: zero errors, at most 40 warnings. The nano emission takes about 1.5 min.
"""
from __future__ import annotations

import re

import pytest

from hw.params import preset
from rtl_gen.emit import emit
from verification.lint import MAX_WARNINGS, passes, spec_lint

ARRAY = re.compile(r"^\s*reg\b(?:\s*\[[^\]]*\])?\s*\S+\s*\[[^\]]*\]\s*;", re.M)     # reg [w] name [depth]: an inferred memory


@pytest.mark.parametrize("chip", ["tiny", "nano"])
def test_emitted_chip_meets_the_lint_gate(chip, tmp_path):
    emit("chip", tmp_path / "rtl", preset(chip))
    result, command = spec_lint(tmp_path / "rtl")
    assert command.startswith(f"(cd {tmp_path} && verilator --lint-only -Wall -Wno-fatal --top-module msh_chip_top")
    warnings = "\n".join(ln for ln in result.output.splitlines() if ln.startswith("%"))
    assert passes(result), f"{chip}: {result.errors} errors, {result.warnings} warnings > {MAX_WARNINGS}\n{warnings}"
    arrays = ARRAY.findall((tmp_path / "rtl" / "msh_chip_top.v").read_text())
    assert not arrays, f"SPEC §5 forbids on-chip arrays other than msh_sram / msh_rom: {arrays[:3]}"


def test_gate_fails_over_the_limit(tmp_path):
    """The gate is not a formality: Verilog with 41 warnings fails it, one with 40 passes (n truncating
    assignments, plus one DECLFILENAME: the second module of a file is not named after it)."""
    from verification.runner import lint

    def verilog(n: int) -> str:
        subs = "\n".join(f"module noisy{k}(input [7:0] a, output [3:0] y); assign y = a + 8'd1; endmodule" for k in range(n))
        inst = " ".join(f"wire [3:0] y{k}; noisy{k} n{k}(.a(8'd{k}), .y(y{k}));" for k in range(n))
        ys = ", ".join(f"y{k}" for k in range(n))
        return f"module top(output [{4 * n - 1}:0] y); {inst} assign y = {{{ys}}}; endmodule\n{subs}\n"

    for n, ok in ((40, False), (39, True)):
        src = tmp_path / str(n) / "top.v"
        src.parent.mkdir()
        src.write_text(verilog(n))
        result = lint([src], "top", cwd=tmp_path)
        assert result.errors == 0 and result.by_rule == {"Warning-WIDTHTRUNC": n, "Warning-DECLFILENAME": 1}, result.output
        assert passes(result) is ok
