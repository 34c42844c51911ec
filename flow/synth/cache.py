"""The part cache: each part's mapped netlists and report data in a folder named by the digest of what its
Yosys run depends on (``<cache>/<digest>/``), so that a synthesis maps only the parts whose digest it has
not seen, and the plan (the module sizes the partition needs) under the digest of the whole source.

A part's digest covers its Verilog (flow/synth/sources.py: its modules and its black boxes' interfaces, or
every file when the source cannot be split), its top and black boxes, the options, the liberty and
full-adder map texts, the macro stubs, the cells the script names, this package's worker (the Yosys and
ABC scripts) and the pyosys version. An entry is written into a temporary folder and renamed into place
only when complete, with ``meta.json`` listing its files' sizes and SHA-256: an entry whose files do not
match is removed, not used.
"""
from __future__ import annotations

import hashlib
import importlib.metadata
import json
import os
import shutil
import time
from pathlib import Path

from flow.synth import worker
from flow.synth.partition import Part
from flow.synth.sources import Source
from flow.synth.spec import MACRO_STUBS, MACROS
from pdk_config.nangate45 import BUFFER, TIE_HI, TIE_LO

PART_SCHEMA = "nano-k3/synth-part/3"   # the layout of an entry or the Yosys script: change it when either changes
KEEP_UNUSED = 12                       # entries a run did not use that survive it (most recently used first)
KEEP_PLANS = 4


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 22):
            h.update(chunk)
    return h.hexdigest()


def pyosys_version() -> str | None:
    try:
        return importlib.metadata.version("pyosys")
    except importlib.metadata.PackageNotFoundError:
        return None


def _tools(job: dict) -> dict:
    """What every Yosys run of this package depends on besides its Verilog."""
    return {"worker_sha256": sha256_file(Path(worker.__file__)), "pyosys": pyosys_version(),
            "liberty_sha256": sha256_file(Path(job["liberty"])), "fa_map_sha256": sha256_file(worker.FA_MAP),
            "macro_stubs": MACRO_STUBS, "macros": list(MACROS), "cells": [BUFFER, TIE_HI, TIE_LO],
            "defines": list(job["defines"])}


def _digest(fields: dict, text: str = "") -> str:
    h = hashlib.sha256(json.dumps(fields, sort_keys=True).encode())
    h.update(text.encode("utf-8", errors="surrogateescape"))
    return h.hexdigest()


def plan_digest(job: dict, source: Source) -> str:
    return _digest({"schema": PART_SCHEMA, "kind": "plan", "top": job["top"], **_tools(job),
                    "files_sha256": source.files_sha256})


def part_digests(job: dict, parts: list[Part], texts: list[str | None], source: Source) -> list[str]:
    """The digest of each part; ``texts[i]`` is the Verilog part i reads, None when it reads every file."""
    tools = _tools(job)
    options = {k: job[k] for k in ("flatten", "full_adders", "abc_period_ps", "dont_use")}
    return [_digest({"schema": PART_SCHEMA, "kind": "part", "top": p.top, "blackbox": list(p.blackbox),
                     **options, **tools, "files_sha256": source.files_sha256 if text is None else None}, text or "")
            for p, text in zip(parts, texts)]


class PartCache:
    def __init__(self, root: Path):
        self.root = root

    def lookup(self, digest: str) -> Path | None:
        """The entry of ``digest`` if it is complete and its files are intact; a damaged entry is removed."""
        entry = self.root / digest
        if not entry.is_dir():
            return None
        try:
            meta = json.loads((entry / "meta.json").read_text())
            ok = meta.get("schema") == PART_SCHEMA and meta.get("digest") == digest and meta.get("files") and all(
                (entry / name).stat().st_size == f["bytes"] and sha256_file(entry / name) == f["sha256"]
                for name, f in meta["files"].items())
        except (OSError, ValueError, KeyError, TypeError):
            ok = False
        if not ok:
            self._remove(entry)
            return None
        os.utime(entry / "meta.json")          # most recently used, for prune
        return entry

    def meta(self, digest: str) -> dict:
        return json.loads((self.root / digest / "meta.json").read_text())

    def store(self, digest: str, part_dir: Path, meta: dict) -> Path:
        """Moves the finished ``part_dir`` into the cache as the entry of ``digest``."""
        files = {p.name: {"bytes": p.stat().st_size, "sha256": sha256_file(p)}
                 for p in sorted(part_dir.iterdir()) if p.is_file() and p.name not in ("meta.json", "job.json")}
        (part_dir / "meta.json").write_text(json.dumps({"schema": PART_SCHEMA, "digest": digest, **meta,
                                                        "files": files}, indent=1))
        self.root.mkdir(parents=True, exist_ok=True)
        tmp = self.root / f".tmp-{digest[:16]}-{os.getpid()}"
        if tmp.exists():
            shutil.rmtree(tmp)
        shutil.move(str(part_dir), str(tmp))
        entry = self.root / digest
        try:
            tmp.rename(entry)
        except OSError:                       # another run stored it meanwhile (or left a damaged one)
            if self.lookup(digest) is None:
                tmp.rename(entry)
            else:
                shutil.rmtree(tmp)
        return entry

    def load_plan(self, digest: str) -> dict | None:
        try:
            plan = json.loads((self.root / f"plan-{digest}.json").read_text())
        except (OSError, ValueError):
            return None
        os.utime(self.root / f"plan-{digest}.json")
        return plan if isinstance(plan, dict) else None

    def store_plan(self, digest: str, plan: dict) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        tmp = self.root / f".tmp-plan-{digest[:16]}-{os.getpid()}.json"
        tmp.write_text(json.dumps(plan, indent=1))
        tmp.replace(self.root / f"plan-{digest}.json")

    def prune(self, used: set[str], keep: int | None = KEEP_UNUSED) -> None:
        """Keeps the entries in ``used``, the ``keep`` most recently used others (all when None: a design-space
        sweep, flow/dse, revisits every engine variant) and the newest plans; removes leftovers of
        interrupted runs (temporary folders of processes that no longer run)."""
        if not self.root.is_dir():
            return
        entries, plans = [], []
        for p in self.root.iterdir():
            if p.name.startswith(".tmp-"):
                pid = p.name.rsplit("-", 1)[-1].removesuffix(".json")
                if not (pid.isdigit() and _alive(int(pid))):
                    self._remove(p)
            elif p.name.startswith("plan-"):
                plans.append(p)
            elif p.is_dir() and p.name not in used:
                entries.append(p)
        age = lambda p: (p / "meta.json").stat().st_mtime if (p / "meta.json").exists() else 0.0  # noqa: E731
        for p in sorted(entries, key=age, reverse=True)[len(entries) if keep is None else keep:]:
            self._remove(p)
        for p in sorted(plans, key=lambda p: p.stat().st_mtime, reverse=True)[KEEP_PLANS:]:
            p.unlink(missing_ok=True)

    def _remove(self, path: Path) -> None:
        """Renamed away first, so that no run finds a half-removed entry under its digest."""
        if path.is_file():
            path.unlink(missing_ok=True)
            return
        trash = self.root / f".tmp-trash-{path.name[:16]}-{time.monotonic_ns()}-{os.getpid()}"
        try:
            path.rename(trash)
        except OSError:
            return
        shutil.rmtree(trash, ignore_errors=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
