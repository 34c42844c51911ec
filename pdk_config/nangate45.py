"""Locate the Nangate45 PDK and name its files.

Search order: ``$NANGATE45_PDK``, then an OpenROAD-flow-scripts platform directory
(``$FLOW_HOME/platforms/nangate45``, ``$ORFS_HOME/flow/platforms/nangate45``). Both the gzipped
liberty names of the shared PDK folder and ORFS's plain ``.lib`` names are accepted.

``$NANGATE45_PDK`` is read in one place, :func:`pdk_from_env`, which makes a relative value (the README's
``../shared/pdk/nangate45``) absolute once, against the current directory, and writes it back, so every
tool, test and child process started in another directory sees the same absolute folder.
"""
from __future__ import annotations

import gzip
import os
import re
import shutil
from dataclasses import dataclass, field
from pathlib import Path

CORNERS = ("slow", "typical", "fast")
LIBERTY_STEM = "NangateOpenCellLibrary_{corner}"
TECH_LEF = "NangateOpenCellLibrary.tech.lef"
# The ".mod" cell LEF is ORFS's choice for Nangate45 (pins on the routing grid); fall back to the plain one.
CELL_LEFS = ("NangateOpenCellLibrary.macro.mod.lef", "NangateOpenCellLibrary.macro.lef")
CELL_GDS = "NangateOpenCellLibrary.gds"
FAKERAM_RE = re.compile(r"fakeram45_(\d+)x(\d+)\.lef$")

# Cells the flow refers to by name.
TIE_HI = ("LOGIC1_X1", "Z")
TIE_LO = ("LOGIC0_X1", "Z")
BUFFER = ("BUF_X1", "A", "Z")
DFF = "DFF_X1"
SITE = "FreePDK45_38x28_10R_NP_162NW_34O"
# Cells a synthesis must not use (ORFS nangate45 DONT_USE): antenna/filler/tap and the weakest drivers.
DONT_USE = ("TAPCELL_X1", "FILLCELL_X1", "AOI211_X1", "OAI211_X1", "ANTENNA_X1")


PDK_VAR = "NANGATE45_PDK"
_given: dict[str, str] = {}            # the last absolute path written back -> the value it replaced (for errors)


class PdkError(RuntimeError):
    """The PDK, or a file of it, could not be found."""


def pdk_from_env() -> Path | None:
    """``$NANGATE45_PDK`` as an absolute path, None when unset or empty: the one place that reads the variable.

    A relative value is taken from the current directory (where the shell that set it, or ``make``, runs:
    the repository for the README's ``../shared/pdk/nangate45``) and written back absolute into the
    environment, so later reads after a change of directory, and child processes started elsewhere
    (``cwd=``), see the same folder. The path need not exist; :func:`find_pdk` says when it does not.
    """
    value = os.environ.get(PDK_VAR)
    if not value:
        return None
    path = Path(value).expanduser().resolve()
    if str(path) != value:
        _given.clear()
        _given[str(path)] = value
        os.environ[PDK_VAR] = str(path)
    return path


def _shown(found_by: str, root: Path, note: str = "") -> str:
    """``VAR=value`` as the user set it, then in parentheses the absolute folder it stands for when that
    differs (a relative ``$NANGATE45_PDK``) and ``note``."""
    given = _given.get(str(root), str(root)) if found_by == PDK_VAR else str(root)
    notes = [f"that is {root}"] if given != str(root) else []
    notes += [note] if note else []
    return f"{found_by}={given}" + (f" ({': '.join(notes)})" if notes else "")


@dataclass(frozen=True)
class FakeRam:
    depth: int
    width: int
    lef: Path
    lib: Path

    @property
    def name(self) -> str:
        return f"fakeram45_{self.depth}x{self.width}"


@dataclass(frozen=True)
class Pdk:
    root: Path
    found_by: str                      # which search rule found it
    liberty: dict[str, Path]           # corner -> liberty file (.lib or .lib.gz)
    tech_lef: Path
    cell_lef: Path
    cell_gds: Path | None
    klayout_lyt: Path | None
    klayout_lyp: Path | None
    fakerams: tuple[FakeRam, ...] = field(default=())

    @property
    def corners(self) -> tuple[str, ...]:
        return tuple(c for c in CORNERS if c in self.liberty)

    def plain_liberty(self, corner: str, cache: Path) -> Path:
        """A readable uncompressed liberty for ``corner`` (decompressed into ``cache`` when gzipped)."""
        if corner not in self.liberty:
            raise PdkError(f"corner {corner!r} not in the PDK at {self.root}; available: {list(self.corners)}")
        src = self.liberty[corner]
        if src.suffix != ".gz":
            return src
        dst = cache / src.name[:-3]
        if not dst.exists() or dst.stat().st_mtime < src.stat().st_mtime:
            cache.mkdir(parents=True, exist_ok=True)
            tmp = dst.with_name(f"{dst.name}.{os.getpid()}.tmp")   # parallel test workers share the cache
            with gzip.open(src, "rb") as fi, open(tmp, "wb") as fo:
                shutil.copyfileobj(fi, fo)
            tmp.replace(dst)
        return dst


def _candidates() -> list[tuple[str, Path]]:
    out = []
    pdk = pdk_from_env()
    if pdk is not None:
        out.append((PDK_VAR, pdk))
    if os.environ.get("FLOW_HOME"):
        out.append(("FLOW_HOME", Path(os.environ["FLOW_HOME"]) / "platforms" / "nangate45"))
    if os.environ.get("ORFS_HOME"):
        out.append(("ORFS_HOME", Path(os.environ["ORFS_HOME"]) / "flow" / "platforms" / "nangate45"))
    return out


def _find(root: Path, *names: str) -> Path | None:
    for sub in ("", "lib", "lef", "gds", "klayout"):
        for n in names:
            p = root / sub / n
            if p.is_file():
                return p
    return None


def _load(root: Path, found_by: str) -> Pdk:
    liberty = {}
    for corner in CORNERS:
        stem = LIBERTY_STEM.format(corner=corner)
        p = _find(root, stem + ".lib", stem + ".lib.gz")
        if p:
            liberty[corner] = p
    tech, cell = _find(root, TECH_LEF), _find(root, *CELL_LEFS)
    missing = [n for n, p in (("typical liberty (NangateOpenCellLibrary_typical.lib[.gz])", liberty.get("typical")),
                              (TECH_LEF, tech), (" or ".join(CELL_LEFS), cell)) if p is None]
    if missing:
        raise PdkError(f"{_shown(found_by, root)} is not a Nangate45 PDK: missing {', '.join(missing)} "
                       f"(looked in {root} and its lib/, lef/ folders)")
    rams = []
    for lef in sorted(root.glob("**/fakeram45_*.lef")):
        m = FAKERAM_RE.search(lef.name)
        lib = _find(root, lef.name[:-4] + ".lib")
        if m and lib:
            rams.append(FakeRam(int(m[1]), int(m[2]), lef, lib))
    return Pdk(root=root, found_by=found_by, liberty=liberty, tech_lef=tech, cell_lef=cell,
               cell_gds=_find(root, CELL_GDS), klayout_lyt=_find(root, "FreePDK45.lyt"),
               klayout_lyp=_find(root, "FreePDK45.lyp"), fakerams=tuple(rams))


def find_pdk() -> Pdk:
    """The first PDK the search rules find; a PdkError naming every rule and path otherwise."""
    tried = []
    for found_by, root in _candidates():
        if root.is_dir():
            return _load(root, found_by)
        tried.append(_shown(found_by, root, "no such directory"))
    if not tried:
        tried.append("no variable set")
    raise PdkError(
        "Nangate45 PDK not found. Set NANGATE45_PDK to a folder with lib/NangateOpenCellLibrary_typical.lib[.gz], "
        f"lef/{TECH_LEF} and lef/{CELL_LEFS[0]} (absolute, or relative to the current directory: e.g. "
        "../shared/pdk/nangate45 from the repository), or FLOW_HOME / ORFS_HOME to an "
        "OpenROAD-flow-scripts checkout (platforms/nangate45). Tried: " + "; ".join(tried))
