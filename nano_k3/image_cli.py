"""``python -m nano_k3.image``: build a memory image, show one, validate one (SPEC_NANO_KPU.md §4).

    python -m nano_k3.image build --config nano --seed 1 --seq-len 48 -o nano.bin
    python -m nano_k3.image show nano.bin       # header words, descriptor table, regions, values, checks
    python -m nano_k3.image validate nano.bin   # "OK", or every problem and exit status 1

Every check is the library's (``nano_k3.image.check_image``); this module only prints. The original form
without a command, ``python -m nano_k3.image --config nano ... -o nano.bin``, still builds.
"""
from __future__ import annotations

import argparse
import dataclasses
import os
import sys
from pathlib import Path

import numpy as np

from .config import PRESETS, ModelConfig, preset
from .image import (
    FORMAT_VERSION, HEADER_CFG_WORDS, HEADER_LAYOUT_WORDS, STATUS_DONE, WORD_BITMAP, WORD_MAGIC, WORD_PROMPT_LEN, WORD_VERSION,
    ImageCheck, ImageLayout, RowCheck, check_image, name_hash, record_specs, record_values, weight_bytes, write_image,
)
from .out_paths import output_file
from .weights import generate, generate_tokens

# Header words 0..31 by the library's field names (SPEC §4.1 gives their meaning).
WORD_NAMES = {WORD_MAGIC: "magic", WORD_VERSION: "format_version", WORD_BITMAP: "layer_bitmap",
              **HEADER_CFG_WORDS, **HEADER_LAYOUT_WORDS, 31: "n_positions"}
ADDRESS_WORDS = range(23, 29)
SHOWN_PROBLEMS = 30  # validate prints this many problems, then a count


def summary(layout: ImageLayout) -> str:
    wb = weight_bytes(layout.cfg)
    lines = [
        f"config {layout.cfg.name}, group {layout.cfg.group_size}, seq_len {layout.seq_len}",
        f"size {layout.size} B, {layout.n_records} descriptors at {layout.desc_addr}",
        f"tensors {layout.descriptors[0].addr}..{layout.tokens_addr}, tokens {layout.tokens_addr}, "
        f"logits {layout.logits_addr} (stride {layout.logits_stride}), argmax {layout.argmax_addr}, "
        f"status {layout.status_addr}, scratch {layout.scratch_addr} ({layout.scratch_size} B)",
        f"weight bytes: dense {wb.dense}, experts {wb.experts}, embedding {wb.embedding}, "
        f"total {wb.total}, active/token {wb.active_per_token}",
    ]
    return "\n".join(lines)


# --- show -----------------------------------------------------------------------------------

def _word_note(i: int, value: int, check: ImageCheck) -> str:
    if i == WORD_MAGIC:
        return f"0x{value:08x} ({value.to_bytes(4, 'big').decode('latin-1')!r})"
    if i == WORD_BITMAP and check.cfg is not None:
        return f"0x{value:x} ({', '.join(f'L{j} {k.upper()}' for j, k in enumerate(check.cfg.layer_kinds))})"
    if i in ADDRESS_WORDS:
        return f"0x{value:x}"
    return ""


def show_header(check: ImageCheck) -> list[str]:
    lines = [f"header: {len(check.words)} words at 0"]
    for i in range(32):
        value = int(check.words[i])
        lines.append(f"  {i:3d}  {WORD_NAMES[i]:15s} {value:>10d}  {_word_note(i, value, check)}".rstrip())
    prompt = int(check.words[WORD_PROMPT_LEN])
    lines.append(f"  {WORD_PROMPT_LEN:3d}  {'prompt_len':15s} {prompt:>10d}  "
                 + (f"generate mode: positions from {prompt} take the previous argmax" if prompt else "0: SPEC mode")
                 + " (extension, issue 19)")
    reserved = check.words[WORD_PROMPT_LEN + 1:]
    lines.append("  33..63 reserved: " + ("all 0" if not reserved.any() else f"{np.count_nonzero(reserved)} not 0"))
    return lines


def _value_range(row: RowCheck, data: bytes) -> str:
    if not row.readable or row.length != row.record.length:
        return "-"
    v = record_values(row.record, data[row.addr:row.addr + row.length])
    return f"{int(v.min())}..{int(v.max())}" if v.size else "empty"


def show_descriptors(check: ImageCheck, data: bytes) -> list[str]:
    by_hash = {name_hash(r.name): r.name for r in record_specs(check.cfg)}
    table = check.region("table")
    lines = [f"descriptor table: {len(check.rows)} records x 16 B at {table.addr}; names from the stored "
             "FNV-1a hashes",
             f"  {'#':>3s}  {'hash':10s}  {'name (from hash)':22s} {'address':>8s} {'bytes':>6s} {'aux':>4s}  "
             f"{'shape':9s} {'dtype':5s} {'values':>12s}  check"]
    for row in check.rows:
        shape = "x".join(map(str, row.record.shape))
        lines.append(f"  {row.index:3d}  0x{row.hash:08x}  {by_hash.get(row.hash, '?'):22s} {row.addr:8d} "
                     f"{row.length:6d} {row.aux:4d}  {shape:9s} {row.record.dtype.lstrip('<'):5s} "
                     f"{_value_range(row, data):>12s}  {'; '.join(row.problems) or 'ok'}")
    return lines


def show_regions(check: ImageCheck) -> list[str]:
    lines = ["regions:"]
    for r in check.regions:
        lines.append(f"  {r.what:27s} {r.addr:8d} {r.length:8d} B  {r.problem or 'ok'}")
    return lines


def _ids(data: bytes, check: ImageCheck, key: str) -> str:
    r = check.region(key)
    if r is None or not r.readable:
        return "(outside the file)"
    return " ".join(map(str, np.frombuffer(data, "<u4", count=r.length // 4, offset=r.addr).tolist()))


def show_values(check: ImageCheck, data: bytes) -> list[str]:
    lines = [f"tokens: {_ids(data, check, 'tokens')}"]
    status = check.region("status")
    if status is not None and status.readable:
        word = int(np.frombuffer(data, "<u4", count=1, offset=status.addr)[0])
        meaning = {0: "no run yet, outputs empty", STATUS_DONE: "run finished"}.get(
            word, "not a finished run (the chip writes 0xBAD000xx for an image it rejects)")
        lines.append(f"status: 0x{word:08x} ({meaning})")
        if word:
            lines.append(f"argmax: {_ids(data, check, 'argmax')}")
    return lines


def _preset_name(cfg: ModelConfig) -> str | None:
    """The preset whose dimensions the header carries, if any (the header has no name)."""
    return next((name for name, p in PRESETS.items()
                 if dataclasses.replace(p, name=cfg.name, group_size=cfg.group_size) == cfg), None)


def show(check: ImageCheck, data: bytes, path: Path) -> str:
    lines = [f"{path}: {check.file_len} bytes"]
    name = check.cfg and _preset_name(check.cfg)
    if check.cfg is not None and not name:
        lines.append("model: no preset has the header's dimensions")
    if check.layout is not None:
        layout = check.layout
        if name:  # the header carries no name: call it by the preset it matches
            layout = dataclasses.replace(layout, cfg=dataclasses.replace(layout.cfg, name=name))
        lines += [summary(layout), ""]
    if check.words is not None:
        lines += show_header(check) + [""]
    if check.rows:
        lines += show_descriptors(check, data) + [""]
    if check.regions:
        lines += show_regions(check) + [""]
    if check.cfg is not None and check.rows:
        lines += show_values(check, data) + [""]
    lines.append(verdict(check, path, limit=None))
    return "\n".join(lines)


# --- validate -------------------------------------------------------------------------------

def verdict(check: ImageCheck, path: Path, limit: int | None = SHOWN_PROBLEMS) -> str:
    """"OK" with what was checked, or the problems (the first ``limit`` of them)."""
    if check.ok:
        cfg, layout = check.cfg, check.layout
        return (f"{path}: OK (format {FORMAT_VERSION}, seq_len {layout.seq_len}, group {cfg.group_size}, "
                f"{layout.n_records} descriptors: every name hash, length, aux, address, alignment and "
                f"region bound checked, zero points in 0..15, token and argmax ids below vocab {cfg.vocab})")
    n = len(check.problems)
    lines = [f"{path}: {n} problem{'s' * (n > 1)}"]
    lines += [f"  {p}" for p in check.problems[:limit]]
    if limit is not None and n > limit:
        lines.append(f"  ... and {n - limit} more (python -m nano_k3.image show {path} marks every descriptor)")
    return "\n".join(lines)


# --- commands -------------------------------------------------------------------------------

def _read(ap: argparse.ArgumentParser, path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError as e:
        ap.error(f"{path}: cannot read it: {e.strerror}")


def add_build(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--config", default="nano", help="model preset (default nano)")
    ap.add_argument("--seed", type=int, required=True, help="weight and token seed (>= 0)")
    ap.add_argument("--seq-len", type=int, required=True, help="positions, 1..max_seq")
    ap.add_argument("--group", type=int, default=None, help="int4 group size override (64 or 128)")
    ap.add_argument("-o", "--output", required=True, help="image file to write (its folder must exist)")


def run_build(ap: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    out = output_file(ap, "-o", args.output)
    try:
        cfg = preset(args.config)
        if args.group is not None:
            cfg = cfg.with_group(args.group)
        tokens = generate_tokens(cfg, args.seed, args.seq_len)
        weights = generate(cfg, args.seed)
    except ValueError as e:
        ap.error(str(e))
    try:
        image = write_image(out, weights, tokens)
    except OSError as e:
        ap.error(f"-o {out}: cannot write it: {e.strerror}")
    print(f"wrote {out}")
    print(summary(image.layout))
    return 0


def add_file(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("file", type=Path, help="memory image file")


def run_show(ap: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    data = _read(ap, args.file)
    check = check_image(data)
    try:
        print(show(check, data, args.file))
    except BrokenPipeError:  # `show FILE | head`: the reader has gone, which is no error of the image
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return 0 if check.ok else 1


def run_validate(ap: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    check = check_image(_read(ap, args.file))
    print(verdict(check, args.file))
    return 0 if check.ok else 1


# command -> (help, adds its arguments, runs it)
COMMANDS = {
    "build": ("write an image of a preset's random weights and tokens", add_build, run_build),
    "show": ("print header words, descriptor table, regions and values, with every check; exit 1 on a "
             "problem", add_file, run_show),
    "validate": ("print OK or the image's problems; exit status 0 or 1", add_file, run_validate),
}


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0].startswith("-") and argv[0] not in ("-h", "--help"):
        argv.insert(0, "build")  # the original form, before commands existed: options only
    ap = argparse.ArgumentParser(
        prog="python -m nano_k3.image", formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Build, show or validate a nano-K3 memory image (SPEC_NANO_KPU.md §4).",
        epilog="examples:\n" + __doc__.split("\n\n")[1]
        + "\n\nWithout a command the options are build's (the original form).")
    sub = ap.add_subparsers(dest="command", required=True, metavar="{build,show,validate}")
    parsers = {}
    for name, (help_text, add, _) in COMMANDS.items():
        parsers[name] = sub.add_parser(name, help=help_text, description=help_text)
        add(parsers[name])
    args = ap.parse_args(argv)
    return COMMANDS[args.command][2](parsers[args.command], args)


if __name__ == "__main__":
    sys.exit(main())
