"""What a synthesis reads: the RTL folder (config.json, its file list, the clock it was generated for) and
the liberty's cell areas."""
from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from pathlib import Path

from flow.synth.spec import SynthError


def rtl_clock_ns(config: dict, where: Path | str) -> float:
    """The clock period the RTL was generated for: ``params.clock_ns`` of its config.json (``where``),
    written by rtl_gen from hw.params.ChipParams. ABC's delay target and every later stage's default
    ``--period`` (synth.json keeps the config under ``rtl.config``)."""
    params = config.get("params")
    clock = params.get("clock_ns") if isinstance(params, dict) else None
    if isinstance(clock, bool) or not isinstance(clock, (int, float)) or not clock > 0:
        raise SynthError(f"{where} has no positive params.clock_ns (rtl_gen writes it from hw.params.ChipParams), "
                         f"got {clock!r}")
    return float(clock)


def design_period_ns(period_ns: float | None, synth_result: dict, error: type[Exception]) -> float:
    """``period_ns`` (a stage's ``--period``) if given, else the clock of the RTL ``synth_result`` (synth.json)
    was synthesised from; a missing clock raises ``error``."""
    if period_ns is not None:
        return period_ns
    rtl = synth_result["rtl"]
    try:
        return rtl_clock_ns(rtl["config"], Path(rtl["dir"]) / "config.json")
    except SynthError as e:
        raise error(f"{e}; pass --period") from None


@dataclass(frozen=True)
class RtlInput:
    rtl_dir: Path
    top: str
    config: dict
    config_sha256: str
    filelist: Path
    files: tuple[Path, ...]
    include_dirs: tuple[Path, ...]
    defines: tuple[str, ...]


def _pick_filelist(rtl_dir: Path, config: dict) -> Path:
    files = config.get("files") if isinstance(config.get("files"), dict) else {}
    named = [n for n in (files.get("filelist"), config.get("filelist")) if n]
    named += [config[k] + ".f" for k in ("block", "top") if config.get(k)]
    for name in named:
        if (rtl_dir / name).is_file():
            return rtl_dir / name
    found = sorted(rtl_dir.glob("*.f"))
    if len(found) == 1:
        return found[0]
    raise SynthError(f"no file list in {rtl_dir}: looked for {named or '<block>.f / <top>.f'}; "
                     f"*.f files there: {[p.name for p in found]}")


def _resolve(entry: str, base: Path, line_no: int, filelist: Path) -> Path:
    """An entry relative to the list's folder or the working directory; ``rtl/<x>`` (rtl_gen's lists name
    the files as seen from the RTL folder's parent, SPEC §1) is ``<x>`` in the list's folder."""
    from rtl_gen.emit import filelist_entry
    for cand in (filelist_entry(entry, base), base / entry, Path(entry)):
        if cand.exists():
            return cand.resolve()
    raise SynthError(f"{filelist}:{line_no}: {entry!r} not found (relative to {base} or {Path.cwd()})")


def read_filelist(filelist: Path) -> tuple[list[Path], list[Path], list[str]]:
    """(Verilog files, include dirs, defines) of a Verilator-style file list."""
    files, incdirs, defines = [], [], []
    base = filelist.parent
    for n, raw in enumerate(filelist.read_text().splitlines(), 1):
        line = raw.split("//")[0].strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("+incdir+"):
            incdirs += [_resolve(d, base, n, filelist) for d in line[len("+incdir+"):].split("+") if d]
        elif line.startswith("+define+"):
            defines += [d for d in line[len("+define+"):].split("+") if d]
        elif line.startswith(("-", "+")):
            raise SynthError(f"{filelist}:{n}: option {line!r} is not understood (only files, +incdir+, +define+)")
        else:
            files.append(_resolve(line, base, n, filelist))
    if not files:
        raise SynthError(f"{filelist} names no Verilog file")
    return files, incdirs, defines


def load_rtl(rtl_dir: Path, top: str | None = None) -> RtlInput:
    cfg_path = rtl_dir / "config.json"
    if not cfg_path.is_file():
        raise SynthError(f"{cfg_path} not found: run `python -m rtl_gen --out {rtl_dir}` (make rtl) first")
    raw = cfg_path.read_bytes()
    config = json.loads(raw)
    top = top or config.get("top") or config.get("block")
    if not top:
        raise SynthError(f"{cfg_path} names no 'top' (nor 'block'); pass --top")
    filelist = _pick_filelist(rtl_dir, config)
    files, incdirs, defines = read_filelist(filelist)
    return RtlInput(rtl_dir, top, config, hashlib.sha256(raw).hexdigest(), filelist,
                    tuple(files), tuple(incdirs), tuple(defines))


def abc_period_ps(rtl: RtlInput) -> int:
    """ABC's delay target (-D): the RTL's clock (``rtl_clock_ns``) in ps."""
    return round(1000 * rtl_clock_ns(rtl.config, rtl.rtl_dir / "config.json"))


def liberty_areas(liberty: Path) -> dict[str, float]:
    """Cell name -> area (um^2) of a plain liberty file."""
    text = liberty.read_text()
    out = {}
    for m in re.finditer(r'\bcell\s*\(\s*"?([\w$]+)"?\s*\)\s*\{', text):
        a = re.compile(r"\barea\s*:\s*([0-9.eE+-]+)").search(text, m.end(), m.end() + 2000)
        if a:
            out[m.group(1)] = float(a.group(1))
    return out
