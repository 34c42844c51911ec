"""Outsider conformance of the emitted RTL folder (SPEC §1, §5, §7), on the tiny chip.

An outside evaluator copies the emitted folder alone as ``rtl/`` into a directory of their own and runs
Verilator from there with their macro models and ``-f rtl/filelist.f``. This test does exactly that:

1. emit the tiny chip into a folder not named ``rtl``; copy that folder alone into an empty temporary
   directory as ``rtl/``;
2. read the RTL the file list names as Verilator would (entries relative to the working directory) and
   check it: every entry inside ``rtl/``; no ``$random`` / ``$urandom``, DPI imports or exports,
   ``$system`` or file I/O (``FORBIDDEN``); ``$readmemh`` only of literal ``rtl/roms/`` paths; every
   ``msh_rom``'s INIT_FILE a file under ``rtl/roms/`` that exists in the copy;
3. build with Verilator in that directory (``verification/models/msh_sram.v``, ``msh_rom.v`` and
   ``-f rtl/filelist.f``) and run the project's chip testbench (``verification.test_chip``) there: status
   0x600DD00D and every SPEC §7 check, logits and argmax bit-exact with the fixed-point model;
4. run it again from random initial state (``+verilator+rand+reset+2``) with two seeds: the output
   region byte-identical to the normal run's.

SPEC §7's lint gate (zero errors, at most 40 warnings) is not checked here: it is ``make lint``'s
(``verification.lint.spec_lint``, the same outsider layout; tested in tests/test_lint_gate.py).
"""
from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

from verification.chip_tb import RunSpec, compare_output_regions

# CI runs the tiny chip's short run. The SPEC's own check, the nano chip's long run from a copy of its
# folder: NANO_K3_CONFORMANCE=nano python -m pytest -q verification/test_rtl_conformance.py (about 15 min).
RUNS = {"tiny": RunSpec(seq_len=8, profile="short", config="tiny", seed=20260706),
        "nano": RunSpec(seq_len=48, profile="long", config="nano", seed=20260706)}
CONFIG = os.environ.get("NANO_K3_CONFORMANCE", "tiny")
if CONFIG not in RUNS:
    raise ValueError(f"NANO_K3_CONFORMANCE={CONFIG!r}: valid values are {', '.join(RUNS)}")
RUN = RUNS[CONFIG]
RAND_SEEDS = (11, 23)
# SPEC §7: no file I/O, $system, $random / $urandom or DPI in the RTL ($readmemh: see readmemh_paths)
FORBIDDEN = re.compile(
    r"\$(?:random|urandom(?:_range)?|dist_\w+|system|fopen|fclose|fflush|feof|ferror|fgetc|fgets|ungetc|fread|fscanf|"
    r"sscanf|fseek|ftell|rewind|fwrite[bho]?|fdisplay[bho]?|fstrobe[bho]?|fmonitor[bho]?|writemem[bh]|readmemb|"
    r"dumpfile|dumpvars|dumpports)\b|\b(?:import|export)\s+\"DPI")
READMEMH = re.compile(r"\$readmemh\s*\(\s*([^,)]*)")
INIT_FILE = re.compile(r"\.INIT_FILE\s*\(\s*\"([^\"]*)\"\s*\)")


def _code(text: str) -> str:
    """Verilog without comments (a forbidden name in a comment is no call)."""
    return re.sub(r"//[^\n]*|/\*.*?\*/", "", text, flags=re.S)


def listed_sources(work: Path, filelist: str = "rtl/filelist.f") -> list[Path]:
    """The file list's entries as Verilator's ``-f`` reads them: relative to the working directory ``work``."""
    entries = [ln.strip() for ln in (work / filelist).read_text().splitlines() if ln.strip() and not ln.startswith("//")]
    outside = [e for e in entries if Path(e).is_absolute() or Path(e).parts[:1] != ("rtl",) or ".." in Path(e).parts]
    assert not outside, f"file list entries outside rtl/: {outside}"
    missing = [e for e in entries if not (work / e).is_file()]
    assert not missing, f"file list entries not found from {work}: {missing}"
    return [work / e for e in entries]


def rtl_violations(work: Path, sources: list[Path]) -> list[str]:
    """Every SPEC §5/§7 rule the listed RTL breaks (empty: none)."""
    bad = []
    n_roms = 0
    for src in sources:
        code = _code(src.read_text(errors="replace"))
        bad += [f"{src.name}: {m.group(0)!r}" for m in FORBIDDEN.finditer(code)]
        for m in READMEMH.finditer(code):
            arg = m.group(1).strip()
            if not (arg.startswith('"rtl/roms/') and arg.endswith('"')):
                bad.append(f"{src.name}: $readmemh of {arg!r}, not a literal rtl/roms/ path")
        n_roms += len(re.findall(r"\bmsh_rom\s*#\s*\(", code))
        for m in INIT_FILE.finditer(code):
            path = m.group(1)
            if not path.startswith("rtl/roms/") or not (work / path).is_file():
                bad.append(f"{src.name}: INIT_FILE {path!r} is not a file under rtl/roms/ of the copied folder")
    inits = sum(len(INIT_FILE.findall(_code(s.read_text(errors="replace")))) for s in sources)
    if inits != n_roms:
        bad.append(f"{n_roms} msh_rom instances but {inits} INIT_FILE parameters")
    return bad


def test_rtl_scan_catches_violations(tmp_path):
    """The scan itself: a clean file passes; each kind of violation is reported."""
    rtl = tmp_path / "rtl"
    (rtl / "roms").mkdir(parents=True)
    (rtl / "roms" / "t.hex").write_text("01\n02\n")
    good = 'module a; msh_rom #(.DEPTH(2), .INIT_FILE("rtl/roms/t.hex"), .WIDTH(8)) r (); // $fopen in a comment\nendmodule\n'
    (rtl / "a.v").write_text(good)
    assert rtl_violations(tmp_path, [rtl / "a.v"]) == []
    cases = {'initial x = $random;': "$random", 'import "DPI-C" function int f();': 'import "DPI',
             'initial $readmemh("roms/t.hex", m);': "not a literal rtl/roms/", 'initial $system("ls");': "$system",
             'initial f = $fopen("x");': "$fopen", 'initial $readmemh(FILE, m);': "not a literal rtl/roms/",
             'msh_rom #(.INIT_FILE("rtl/roms/none.hex")) q ();': "INIT_FILE 'rtl/roms/none.hex'"}
    for line, words in cases.items():
        (rtl / "b.v").write_text(f"module b;\n{line}\nendmodule\n")
        got = rtl_violations(tmp_path, [rtl / "a.v", rtl / "b.v"])
        assert any(words in g for g in got), (line, got)


def test_emitted_folder_works_as_rtl_for_an_outsider(tmp_path):
    from hw.params import preset
    from nano_k3.image import plan_layout
    from rtl_gen import emit
    from verification.runner import MODELS
    from verification.chip_run import RAND_RESET_SUFFIX, run_chip_sim

    emitted = emit("chip", tmp_path / f"chip-{CONFIG}", preset(CONFIG))
    work = tmp_path / "evaluator"
    shutil.copytree(emitted.verilog.parent, work / "rtl")          # the folder alone, named rtl
    sources = listed_sources(work)
    bad = rtl_violations(work, sources)
    assert not bad, "\n".join(bad)

    models = [MODELS / "msh_sram.v", MODELS / "msh_rom.v"]          # the SPEC §5 models, from outside rtl/
    sim = dict(build_dir=work, build_args=("-f", "rtl/filelist.f"))  # Verilator and the simulation run in work
    normal = run_chip_sim("conformance", models, emitted.top, [RUN], **sim)
    rep = normal.reports.get(RUN.name)
    assert rep, f"no report; see {normal.log}"
    print(f"{RUN.name}: {rep['cycles']} cycles, status checks: "
          + ", ".join(f"{c['name']} {'PASS' if c['passed'] else 'FAIL'}" for c in rep["checks"]))
    assert normal.passed and rep["passed"], [c for c in rep["checks"] if not c["passed"]]
    assert {c["name"] for c in rep["checks"] if c["passed"]} >= {"status", "bit_exact"}

    layout = plan_layout(RUN.model_config(), RUN.seq_len)
    for seed in RAND_SEEDS:
        rr = run_chip_sim("conformance", models, emitted.top, [RUN], build=False, rand_reset=True,
                          reset_seed=seed, **sim)
        name = RUN.name + RAND_RESET_SUFFIX
        assert name in rr.outputs, f"seed {seed}: no random-initial-state report; see {rr.log}"
        assert rr.passed, [c for c in rr.reports[name]["checks"] if not c["passed"]]
        same = compare_output_regions(normal.outputs[RUN.name], rr.outputs[name], layout, f"seed {seed} vs normal")
        print(f"random initial state, seed {seed}: {same.message}")
        assert same.passed, same.message
