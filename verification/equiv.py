"""Formal equivalence of RTL and its synthesised Nangate45 netlist, one synthesis part at a time, with Yosys's
equiv passes.

    python -m verification.equiv --synth build/synth [--only core.mem ...] [--timeout 1800] [--out build/equiv]
                                                                                                  (make equiv)
    python -m verification.equiv --blocks mem_engine [...] [--preset tiny] [--out build/equiv]

flow.synth maps a design in parts (an engine each, the rest of the chip as one more) and keeps each part's RTL
text and netlist in its part cache; each part is one proof (``jobs_of``), the smallest first. Gold is the part's
RTL; gate its netlist with every cell replaced by its model from the liberty (flow.cell_models), both flattened.
``msh_sram`` / ``msh_rom`` (flow.synth's ``macro_stubs.v``) and the other parts a part instantiates are black
boxes on both sides, cut out (``expose -evert``): each pin of an instance becomes a port named after the
instance and pin, the same in both designs, so what they return is an input both share and what they are given
(addresses, write data, enables, operands) are outputs that must be equal. A proof of every part is thus a
proof of the whole netlist.

``equiv_make`` pairs the signals both designs name alike: the ports, and the registers, whose RTL names
synthesis keeps on their Q nets. What synthesis does to names and registers, and how both designs are prepared
for it (tests/test_equiv.py has a case for each, proven with the step and not without it):
- the RTL's intermediate wires are named ``$...`` (Amaranth's names) and the netlist keeps some of those names
  on other signals, so ``$`` names are made private on both sides (``rename -hide``), in submodules too;
- but a ``$`` name on a flip-flop's output is a register (Amaranth's ``$signal``) or an RTL wire synthesis found
  equal to one (``$28`` for ``sub * 128``), often narrowed: each side gets a public ``reg$...`` wire on the bits
  both have, and it pairs (``dollar_registers``);
- synthesis merges registers, and single bits of registers, that always load the same value, and drops constant
  ones: the gold goes through Yosys's ``opt`` and then has its flip-flops split into bits and merged
  (``MERGE_BITS``), so that no register is left without a partner;
- synthesis keeps some registers under the name of another RTL signal (the memory engine's read address in
  flip-flops named after a multiplexer that reads it): both designs are simulated side by side on random inputs
  just before ``equiv_make`` (verification.equiv_pairs), a ``reg$`` copy whose values differ is dropped, and a
  register left without a partner by name is paired with one of the other design's that has the same values
  (a wrong pair is simply not proven, so the proof stays sound).
``equiv_induct`` then proves every pair at once by induction over one step (all pairs equal now, so equal one
cycle later), and what that leaves over three steps (``SEQ``). A part is **proven** when no pair is
left unproven; one whose proof does not finish in ``--timeout`` seconds (wide multipliers are hard for SAT) or
leaves pairs unproven is reported as such: it is then only simulated (verification.gatesim). A synthesis without
parts (tests' small netlists) is one proof of the whole netlist against the RTL of its filelist. With
``--blocks``, each engine is first emitted at ``--preset`` (rtl_gen) and synthesised (flow.synth) under ``--out``.

Each proof runs Yosys (pyosys) in its own process, with its address space capped (``MEMORY_LIMIT``) so a hard
proof cannot starve the machine; the results go to ``<out>/equiv.json`` and one log per part.
"""
from __future__ import annotations

import argparse
import json
import re
import resource
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from flow.cell_models import DEFAULT_OUT as CELL_MODELS_OUT
from flow.cli import die_with_parent
from flow.synth.driver import part_cache_dir
from flow.synth.sources import module_texts
from flow.cell_models import ensure_models
from verification import equiv_pairs

REPO = Path(__file__).resolve().parent.parent
MEMORY_LIMIT = 3 << 30          # bytes of address space per Yosys proof
# The macro stubs are read deferred (READ_MACRO_STUBS) so that each instance gets a module of its own parameters:
# otherwise the stubs' default widths (DEPTH 16, WIDTH 8) would cut a wider pin to its low bits. Then each macro pin
# becomes a port of the same name in both designs.
READ_MACRO_STUBS = "read_verilog -lib -defer"
CUT_MACROS = "expose -evert t:msh_rom t:msh_sram t:$paramod*\\msh_rom t:$paramod*\\msh_sram"
# Time steps of the inductions, in turn: one step closes most parts (their registers pair by name); what it
# leaves, three steps close when it only held in states the design never reaches (the mac input stage: 10 of
# 373 pairs with one step, all with three)
SEQ = (1, 3)
# The gold's flip-flops one bit each, then identical ones merged: synthesis merges bits of different registers
# that always load the same value (s1_i0[8:4] and s1_i1[8:4] both hold `chunk`), which opt on whole registers misses
MERGE_BITS = ("simplemap t:$*dff*", "opt_merge")
_STATUS = re.compile(r"Found (\d+) \$equiv cells in \S+:\s*\n\s*Of those cells (\d+) are proven and (\d+) are "
                     r"unproven", re.M)


class EquivError(RuntimeError):
    """The check cannot start (missing synthesis or RTL); the message says what to run."""


@dataclass(frozen=True)
class Job:
    """One proof: the RTL module ``top`` (``gold``: Verilog files) against its netlist. ``boxes`` are other
    parts of the same synthesis that ``top`` instantiates: black boxes on both sides (their port declarations
    in ``box_stubs``), cut out like the macros, each proven as its own job."""
    top: str
    gold: tuple[Path, ...]
    netlist: Path
    macro_stubs: Path
    boxes: tuple[str, ...] = ()
    box_stubs: str = ""


def _width(module_text: str, name: str) -> int | None:
    """The width of wire or reg ``\\name`` as the module declares it (``[msb:lsb]``, or one bit)."""
    m = re.search(r"\b(?:wire|reg|input|output)\s+(?:signed\s+)?(?:\[(\d+):(\d+)\]\s*)?\\" + re.escape(name)
                  + r"\s*;", module_text)
    return None if m is None else (abs(int(m.group(1)) - int(m.group(2))) + 1 if m.group(1) else 1)


def dollar_registers(netlist_text: str, gold_text: str) -> dict[str, dict[str, tuple[int, int]]]:
    """Per module, the ``$`` names the netlist gives flip-flop outputs (``.Q`` pins) that the RTL's module of the
    same name declares too, with their widths (RTL, netlist). Some are Amaranth's register names (``$signal``);
    others are an RTL wire synthesis found equal to a register and named it after (``$28`` for ``sub * 128``,
    named after ``sub``), often narrowed by synthesis (``$13``: 22 bits in the RTL, 21 in the netlist). Either
    way both designs have a signal of that name with the same low bits: each side gets a public ``reg$...``
    wire on those bits (before ``flatten``, so that ``opt_clean`` keeps it in a submodule too) and it pairs;
    every other ``$`` name is hidden."""
    gold = module_texts(gold_text)
    out = {}
    for module, body in module_texts(netlist_text).items():
        widths = {n: (_width(gold.get(module, ""), n), _width(body, n))
                  for n in sorted(set(re.findall(r"\.Q\(\s*\\(\$\S+)", body)))}
        widths = {n: w for n, w in widths.items() if None not in w}
        if widths:
            out[module] = widths
    return out


def _public_copies(keep: dict[str, dict[str, tuple[int, int]]], side: int) -> list[str]:
    """Yosys commands that give each kept ``$`` name of ``keep`` (side 0: gold, 1: gate) a public wire
    ``reg$...`` on the bits both sides have."""
    cmds = []
    for module, names in keep.items():
        cmds.append(f"cd {module}")
        for n, widths in names.items():
            w = min(widths)
            bits = f"\\{n}" if w == widths[side] else f"\\{n}[{w - 1}:0]"
            cmds += [f"add -wire \\reg{n} {w}", f"connect -set \\reg{n} {bits}"]
        cmds.append("cd")
    return cmds


def yosys_script(job: Job, cells: Path, keep: dict[str, dict[str, tuple[int, int]]], stubs: Path | None,
                 graphs: Path | None = None) -> list[str]:
    """Gold and gate prepared alike (module docstring), paired by name and proven by induction."""
    rtl = " ".join(map(str, job.gold))
    # the `$` names of the module and of its flattened submodules (`inst.$28`)
    hide = "rename -hide w:$* w:*.$* %u"
    cut = CUT_MACROS + "".join(f" t:{b}" for b in job.boxes)
    boxes = [f"blackbox {' '.join(job.boxes)}"] if job.boxes else []
    box_lib = [f"read_verilog -lib {stubs}"] if stubs else []
    return [
        f"{READ_MACRO_STUBS} {job.macro_stubs}", f"read_verilog -sv {rtl}", *boxes, f"hierarchy -top {job.top}",
        "proc", *_public_copies(keep, 0), "flatten", "opt", *MERGE_BITS, hide, "opt_clean", cut, "rename -top gold",
        "design -stash gold",
        f"{READ_MACRO_STUBS} {job.macro_stubs}", *box_lib, f"read_verilog -sv {cells}", f"read_verilog {job.netlist}",
        f"hierarchy -top {job.top}", "proc", *_public_copies(keep, 1), "flatten", hide, "opt_clean", cut,
        "rename -top gate", "design -stash gate",
        "design -copy-from gold -as gold gold", "design -copy-from gate -as gate gate",
        *([f"{equiv_pairs.MARK} {graphs}"] if graphs else []),
        "equiv_make gold gate equiv", "hierarchy -top equiv", "async2sync",
        *(f"equiv_induct -seq {n}" for n in SEQ), "equiv_status",
    ]


def _worker(script_json: str) -> None:
    """Runs in the child: every pass of the script on one design, printing Yosys's log."""
    from pyosys import libyosys as ys
    die_with_parent()            # a stopped check leaves no proof running
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT))
    design = ys.Design()

    def run(cmd: str) -> None:
        print(f"@@PASS {cmd}", flush=True)
        ys.run_pass(cmd, design)
    for cmd in json.loads(script_json):
        if cmd.startswith(equiv_pairs.MARK):
            found, counts = equiv_pairs.find(design, run, Path(cmd.split(maxsplit=1)[1]))
            print(f"@@PAIRS {json.dumps(counts)}", flush=True)
            for c in found:
                run(c)
        else:
            run(cmd)
    print("@@DONE", flush=True)


def _whole(synth_dir: Path, r: dict) -> Job:
    """The whole netlist against the RTL flow.synth read (its filelist): a synthesis without parts."""
    rtl_dir = Path(r["rtl"]["dir"])
    rtl_dir = rtl_dir if rtl_dir.is_absolute() else REPO / rtl_dir
    filelist = rtl_dir / "filelist.f"
    if not filelist.is_file():
        raise EquivError(f"{filelist}, the RTL the netlist came from, is gone: emit it again (python -m rtl_gen)")
    files = [rtl_dir.parent / line.strip() if not Path(line.strip()).is_absolute() else Path(line.strip())
             for line in filelist.read_text().splitlines() if line.strip() and not line.startswith("#")]
    return Job(r["top"], tuple(files), synth_dir / r["files"]["netlist"], synth_dir / "macro_stubs.v")


def _part(synth_dir: Path, cache: Path, part: dict) -> Job:
    """One part of a synthesis from its part cache entry: the RTL it was mapped from and its netlist."""
    folder = cache / part["digest"]
    source, netlist = folder / "source.v", folder / "netlist.v"
    if not (source.is_file() and netlist.is_file()):
        raise EquivError(f"part {part['top']}: {folder} lacks source.v or netlist.v (the part cache was cleaned): "
                         f"synthesise again (python -m flow.synth --out {synth_dir})")
    boxes = tuple(part.get("black_boxes") or ())
    modules = module_texts(source.read_text()) if boxes else {}
    return Job(part["top"], (source,), netlist, synth_dir / "macro_stubs.v", boxes,
               "".join(modules.get(b, "") for b in boxes))


def jobs_of(synth_dir: Path, only: list[str] | None = None) -> list[Job]:
    """The proofs a flow.synth folder asks for: one per part (smallest first) when synthesis mapped the design
    in parts, else the whole netlist. ``only`` keeps the parts whose module name is, or ends in ``.<name>``."""
    synth_dir = Path(synth_dir)
    synth_json = synth_dir / "synth.json"
    if not synth_json.is_file():
        raise EquivError(f"{synth_json} not found: synthesise first (python -m flow.synth --rtl <rtl> --out {synth_dir})")
    r = json.loads(synth_json.read_text())
    if not r.get("parts"):
        jobs = [_whole(synth_dir, r)]
    else:
        parts = sorted(r["parts"], key=lambda p: p.get("size_estimate") or 0)
        jobs = [_part(synth_dir, part_cache_dir(synth_dir, r["part_cache"]), p) for p in parts]
    if only:
        unknown = [n for n in only if not any(j.top == n or j.top.endswith("." + n) for j in jobs)]
        if unknown:
            raise EquivError(f"{unknown}: no such part in {synth_json}; its parts: {[j.top for j in jobs]}")
        jobs = [j for j in jobs if any(j.top == n or j.top.endswith("." + n) for n in only)]
    return jobs


def check(job: Job, out: Path, timeout_s: float, cell_models: Path = CELL_MODELS_OUT, pairs: bool = True) -> dict:
    """Prove one job (module docstring); returns its record: proven, equiv cells proven / unproven, time, and
    what simulation paired (``pairs``: verification.equiv_pairs; off, names alone pair)."""
    missing = [f for f in (*job.gold, job.netlist) if not f.is_file()]
    if missing:
        raise EquivError(f"files of {job.top} not found: {missing}; emit the RTL and synthesise again")
    cells = ensure_models(Path(cell_models)).verilog
    out.mkdir(parents=True, exist_ok=True)
    log = out / f"{job.top}.log"
    stubs = None
    if job.boxes:
        stubs = out / f"{job.top}.boxes.v"
        stubs.write_text(job.box_stubs)
    keep = dollar_registers(job.netlist.read_text(), "\n".join(f.read_text() for f in job.gold))
    script = yosys_script(job, cells, keep, stubs, out / f"{job.top}.graphs" if pairs else None)
    t0 = time.monotonic()
    rec = {"block": job.top, "netlist": str(job.netlist), "log": str(log), "script": script}
    try:
        proc = subprocess.run([sys.executable, "-c", f"from verification.equiv import _worker; _worker({json.dumps(json.dumps(script))})"],
                              capture_output=True, text=True, timeout=timeout_s, cwd=REPO)
        text = proc.stdout + proc.stderr
    except subprocess.TimeoutExpired as e:
        text = (e.stdout or b"").decode(errors="replace") if isinstance(e.stdout, bytes) else (e.stdout or "")
        log.write_text(text)
        last = re.findall(r"^@@PASS (.*)$", text, re.M)
        return {**rec, "status": "timeout", "proven": False, "seconds": round(time.monotonic() - t0, 1),
                "stopped_in": last[-1] if last else None}
    log.write_text(text)
    m = _STATUS.search(text)
    full = re.search(r"Found (\d+) \$equiv cells .*\n.*Equivalence successfully proven!", text)
    rec["seconds"] = round(time.monotonic() - t0, 1)
    found = re.search(r"^@@PAIRS (.*)$", text, re.M)
    if found:
        rec.update(json.loads(found.group(1)))
    if "@@DONE" not in text or not (m or full):
        err = re.findall(r"^ERROR: (.*)$", text, re.M)
        if not err and ("MemoryError" in text or "std::bad_alloc" in text):
            err = [f"out of memory under the {MEMORY_LIMIT >> 30} GB cap (MEMORY_LIMIT)"]
        return {**rec, "status": "error", "proven": False, "error": err[-1] if err else f"exit {proc.returncode}"}
    if m:
        total, proven, unproven = map(int, m.groups())
    else:
        total = proven = int(full.group(1))
        unproven = 0
    return {**rec, "status": "proven" if unproven == 0 else "unproven", "proven": unproven == 0,
            "equiv_cells": total, "equiv_proven": proven, "equiv_unproven": unproven}


def md_equiv(r: dict | None, command: str) -> list[str]:
    """The report's section: each part's verdict, its equivalences proven and its time, and the proven count."""
    md = ["## Formal equivalence of RTL and netlist", ""]
    if r is None:
        return md + [f"Not run: `{command}` proves each part of the synthesised netlist (Yosys `equiv_make` + "
                     "`equiv_induct`).", ""]
    proven = sum(b["proven"] for b in r["blocks"])
    md += [f"`{r.get('command', command)}`" + (f" (preset {r['preset']})" if r.get("preset") else "") + ": a part is "
           "proven when every signal pair is (the other parts and the macros cut out at their pins); the others are "
           f"only simulated at gate level. **{proven} of {len(r['blocks'])} proven.**", "",
           "| part | verdict | equivalences proven | seconds |", "|---|---|---:|---:|"]
    for b in r["blocks"]:
        pairs = f"{b['equiv_proven']:,} / {b['equiv_cells']:,}" if "equiv_cells" in b else b.get("error") or \
            f"stopped in `{b.get('stopped_in')}`"
        md.append(f"| {b['block']} | {b['status']} | {pairs} | {b['seconds']:,.0f} |")
    return md + [""]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m verification.equiv", description=__doc__.split("\n\n")[0])
    src = ap.add_mutually_exclusive_group(required=True)
    src.add_argument("--synth", type=Path, action="append", help="flow.synth folder (repeatable)")
    src.add_argument("--blocks", nargs="+", help="engines (rtl_gen blocks) to emit, synthesise and prove")
    ap.add_argument("--only", nargs="+", metavar="PART", help="prove only these parts (e.g. core.mem core.logits)")
    ap.add_argument("--preset", default="tiny", help="chip preset of --blocks (default tiny)")
    ap.add_argument("--out", type=Path, default=REPO / "build" / "equiv")
    ap.add_argument("--timeout", type=float, default=1800.0, help="seconds per proof before it counts as not proven")
    args = ap.parse_args(argv)
    if args.timeout <= 0:
        ap.error(f"--timeout must be positive seconds, got {args.timeout}")
    records = []
    try:
        if args.blocks:
            from flow.blocks import emit_and_synthesise
            try:
                args.synth = list(emit_and_synthesise(args.blocks, args.preset, args.out, "the proof").values())
            except ValueError as e:
                raise EquivError(str(e)) from None
        folders = args.synth
        jobs = [j for synth in folders for j in jobs_of(synth, args.only)]
        for k, job in enumerate(jobs, 1):
            print(f"[{k}/{len(jobs)}] {job.top}: proving (timeout {args.timeout:.0f} s) ...", flush=True)
            rec = check(job, args.out, args.timeout)
            records.append(rec)
            detail = (f"{rec['equiv_proven']}/{rec['equiv_cells']} equivalences proven" if "equiv_cells" in rec
                      else rec.get("error") or f"stopped in {rec.get('stopped_in')}")
            print(f"[{k}/{len(jobs)}] {rec['block']}: {rec['status']} ({detail}; {rec['seconds']} s; log {rec['log']})",
                  flush=True)
    except EquivError as e:
        print(f"verification.equiv: error: {e}", file=sys.stderr)
        return 1
    args.out.mkdir(parents=True, exist_ok=True)
    rec = {"blocks": records, "preset": args.preset if args.blocks else None, "timeout_s": args.timeout,
           "command": "python -m verification.equiv " + " ".join(argv if argv is not None else sys.argv[1:])}
    tmp = args.out / "equiv.json.tmp"
    tmp.write_text(json.dumps(rec, indent=1) + "\n")
    tmp.replace(args.out / "equiv.json")
    proven = [r["block"] for r in records if r["proven"]]
    print(f"proven: {', '.join(proven) or 'none'}; only simulated: "
          f"{', '.join(r['block'] for r in records if not r['proven']) or 'none'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
