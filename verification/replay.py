"""Gate-level replay: the synthesised netlist, part by part, through every cycle of an RTL run of the chip.

    python -m verification.replay --synth build/synth --rtl build/rtl [--out build/replay] [--trace <vcd>]
                                                                                       (make replay)

A chip netlist is too large for Verilator here (verification.gatesim, docs/power.md), so its gate-level run is a
cycle simulation of and-inverter graphs instead: each synthesis part's netlist, with every cell replaced by its
model from the liberty (flow.cell_models, the same models gatesim and verification.equiv use), is turned into a
graph by Yosys (``write_aiger``; cached per part), and the parts are simulated together (verification.aig):
the chip's parts wired to each other as the top part instantiates them, the ``msh_sram`` / ``msh_rom`` macros as
the behavioural models of SPEC §5 (synchronous read with the old contents on a same-cycle write, per-byte write
enables; ROMs combinational, read from their ``rtl/roms`` files). The chip's inputs in each cycle are those of an
RTL simulation of the same run (its top-level ports recorded with Verilator's ``--trace``, verification.vcd), and
every output bit of the netlist is compared with the RTL's in every cycle after reset. As the testbench's
inputs depend only on the chip's outputs, equal outputs in every cycle mean the netlist, given the testbench,
runs the same run: bit-exact where the RTL run was.

Within a cycle the parts are evaluated until no signal between them changes (a part's outputs can depend on
another's in the same cycle, a ROM's data on the address its part drives); a loop that does not settle stops the
run. Flip-flops start at 0, as Verilator starts the RTL's, and the comparison starts once reset has been applied.

For power (flow.chip_power), the graphs can also carry every library cell's output pins as outputs (Yosys
``expose`` after ``flatten``, with the part's cells listed first under OpenSTA's names for them), and each such pin's
changes from one cycle's settled value to the next are counted from the end of reset (zero delay: no glitches).
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from flow.cell_models import DEFAULT_OUT as CELL_MODELS_OUT
from flow.cell_models import ensure_models
from verification.aig import AigSim
from verification.equiv import REPO, jobs_of
from verification.replay_graphs import ReplayError, part_graph
from verification.vcd import Cycles, read_cycles

MAX_ROUNDS = 16                 # evaluations of the parts within one cycle before it counts as a combinational loop
RESET = "rst_n"                 # the chip's reset (SPEC §2), active low
SHOW_MISMATCHES = 20
def read_memh(path: Path, depth: int) -> list[int]:
    """A ``$readmemh`` file: hex words, ``@address`` jumps, ``//`` comments; unset words 0."""
    words, addr = [0] * depth, 0
    for line in Path(path).read_text().splitlines():
        for tok in line.split("//")[0].split():
            if tok.startswith("@"):
                addr = int(tok[1:], 16)
            else:
                if addr < depth:
                    words[addr] = int(tok.replace("_", ""), 16)
                addr += 1
    return words


@dataclass
class Pin:
    """A port of a part's graph: the graph's input or output index of each bit it has (``bit``: which bit of the
    port each is; a graph leaves out input bits nothing reads)."""
    part: int
    index: np.ndarray
    bit: np.ndarray

    def value(self, outs: list[np.ndarray]) -> int:
        bits = np.zeros(int(self.bit.max(initial=-1)) + 1, dtype=np.uint8)
        bits[self.bit] = (outs[self.part][self.index] & np.uint64(1)).astype(np.uint8)
        return _int(bits)


def _int(bits: np.ndarray) -> int:
    """The number whose bits (bit 0 first) these are."""
    return int.from_bytes(np.packbits(bits.astype(np.uint8), bitorder="little").tobytes(), "little")


def _bits(value: int, width: int) -> np.ndarray:
    raw = np.frombuffer(value.to_bytes((width + 7) // 8, "little"), dtype=np.uint8)
    return np.unpackbits(raw, bitorder="little")[:width].astype(np.uint64)


@dataclass
class Macro:
    """One ``msh_sram`` / ``msh_rom`` (SPEC §5): its pins on the part that instantiates it, and its contents."""
    path: str
    kind: str
    depth: int
    width: int
    part: int                                               # the part that instantiates it
    ins: dict[str, Pin] = field(default_factory=dict)       # pins the part drives (addresses, data, enables)
    outs: dict[str, Pin] = field(default_factory=dict)      # read data, into the part
    words: list[int] = field(default_factory=list)
    rdata: int = 0
    reads: int = 0
    writes: int = 0


def _pins(names: dict[int, tuple[str, int]], part: int) -> dict[str, Pin]:
    """The graph's ports by name, each a Pin with its bits' indices in bit order."""
    by = {}
    for idx, (name, bit) in names.items():
        by.setdefault(name, {})[bit] = idx
    return {n: Pin(part, np.array([b[k] for k in sorted(b)], dtype=np.int64), np.array(sorted(b), dtype=np.int64))
            for n, b in by.items()}


class Chip:
    """The netlist's parts as graphs, wired as the top part instantiates them, with the macros (module docstring)."""

    def __init__(self, synth_dir: Path, rtl_dir: Path, graphs: Path, cells: Path, log=print,
                 cell_outputs: dict[str, list[str]] | None = None):
        """``cell_outputs`` (library cell -> its output pins): count every cell output's toggles (``count_toggles``,
        ``cell_toggles``), with the pins made outputs of the graphs."""
        r = json.loads((Path(synth_dir) / "synth.json").read_text())
        jobs = jobs_of(Path(synth_dir))
        order = sorted(jobs, key=lambda j: (j.top != r["top"], j.top))      # the top part first
        self.tops = [j.top for j in order]
        expose = tuple(sorted({p for pins in (cell_outputs or {}).values() for p in pins}))
        self.sims, self.ins, self.outs, self.leaves = [], [], [], []
        self.prefix = {0: ""}                   # each part's instance path in the chip, as OpenSTA writes it
        self.toggles: list[np.ndarray] | None = None
        self.counted, self._last, self.counts_cells = 0, None, bool(expose)
        for k, job in enumerate(order):
            t0 = time.monotonic()
            aig, leaves = part_graph(job, graphs, cells, expose, tuple(sorted(cell_outputs or ())))
            self.leaves.append(leaves or {})
            log(f"[replay] graph {k + 1}/{len(order)} {job.top}: {len(aig.ands):,} and-gates, "
                f"{len(aig.latches):,} flip-flops ({time.monotonic() - t0:.0f} s)")
            self.sims.append(AigSim(aig))
            self.ins.append(_pins(aig.input_names, k))
            self.outs.append(_pins(aig.output_names, k))
        macros = {m["path"]: m for m in r["macros"]["instances"]}
        part_of = {top: k for k, top in enumerate(self.tops)}
        # per source part, per destination part: the source's output indices and the destination's input indices
        self.links: list[dict[int, tuple[list[int], list[int]]]] = [{} for _ in order]
        self.macros: list[Macro] = []
        for k, top in enumerate(self.tops):
            cut = {name.rsplit(".", 1)[0] for name in [*self.ins[k], *self.outs[k]] if "." in name}
            for inst in sorted(cut - set(self.leaves[k])):
                full = f"{top}.{inst}"
                if full in part_of:
                    self._wire_child(k, inst, part_of[full])
                    self.prefix[part_of[full]] = self.prefix[k] + inst.replace(".", "/") + "/"
                elif full in macros:
                    self.macros.append(self._macro(k, inst, macros[full], Path(rtl_dir)))
                else:
                    raise ReplayError(f"part {top}: cut instance {inst!r} ({full}) is neither a part nor a macro "
                                      "of synth.json")
        self.top_in = {n: p for n, p in self.ins[0].items() if "." not in n}
        self.top_out = {n: p for n, p in self.outs[0].items() if "." not in n}
        self.top_index = np.concatenate([p.index for p in self.top_in.values()]) if self.top_in else np.zeros(0, int)
        self.link_arrays = [{j: (np.array(a, dtype=np.int64), np.array(b, dtype=np.int64)) for j, (a, b) in d.items()}
                            for d in self.links]
        self.srams = [m for m in self.macros if m.kind == "msh_sram"]
        self.roms: dict[int, list[Macro]] = {}
        for m in self.macros:
            if m.kind == "msh_rom":
                self.roms.setdefault(m.part, []).append(m)

    def _wire_child(self, parent: int, inst: str, child: int) -> None:
        """The child's own ports (not the pins of what it cuts out itself) to the parent's pins of ``inst``."""
        for name, pin in self.ins[child].items():        # what the parent gives the child
            if "." in name:
                continue
            src = self.outs[parent].get(f"{inst}.{name}")
            if src is None:
                raise ReplayError(f"{self.tops[child]}: input {name} is not driven by {self.tops[parent]}")
            self._link(src, pin)
        for name, pin in self.outs[child].items():       # what the child returns
            dst = self.ins[parent].get(f"{inst}.{name}")
            if dst is not None and "." not in name:
                self._link(pin, dst)

    def _link(self, src: Pin, dst: Pin) -> None:
        """Each bit ``dst`` has, from the same bit of ``src`` (a graph names every output bit)."""
        where = dict(zip(src.bit.tolist(), src.index.tolist()))
        outs, ins = self.links[src.part].setdefault(dst.part, ([], []))
        for b, idx in zip(dst.bit.tolist(), dst.index.tolist()):
            outs.append(where[b])
            ins.append(idx)

    def _macro(self, part: int, inst: str, rec: dict, rtl_dir: Path) -> Macro:
        m = Macro(rec["path"], rec["type"], int(rec["depth"]), int(rec["width"]), part)
        for name, pin in self.outs[part].items():
            if name.startswith(inst + ".") and name.count(".") == inst.count(".") + 1:
                m.ins[name.rsplit(".", 1)[1]] = pin
        for name, pin in self.ins[part].items():
            if name.startswith(inst + ".") and name.count(".") == inst.count(".") + 1:
                m.outs[name.rsplit(".", 1)[1]] = pin
        if m.kind == "msh_rom":
            init = Path(rec["init_file"])
            tries = [rtl_dir.parent / init, rtl_dir / Path(*init.parts[1:])] if not init.is_absolute() else [init]
            found = next((t for t in tries if t.is_file()), None)
            if found is None:
                raise ReplayError(f"{m.path}: ROM contents {init} not found (tried {[str(t) for t in tries]})")
            m.words = read_memh(found, m.depth)
        else:
            m.words = [0] * m.depth
        return m

    def _drive(self, part: int, index: np.ndarray, words: np.ndarray) -> bool:
        """Set inputs ``index`` of ``part`` to ``words``; whether any changed."""
        sim = self.sims[part]
        if np.array_equal(sim.val[sim.in_vars[index]], words):
            return False
        sim.set(index, words)
        return True

    def _rom_reads(self, part: int, outs: list[np.ndarray]) -> bool:
        """The ROMs of ``part`` read at the addresses it now drives; whether any read data changed."""
        changed = False
        for m in self.roms.get(part, ()):
            for port in ("1", "2"):
                if f"raddr{port}" in m.ins and f"rdata{port}" in m.outs:
                    a, pin = m.ins[f"raddr{port}"].value(outs), m.outs[f"rdata{port}"]
                    word = _bits(m.words[a] if a < m.depth else 0, m.width)
                    changed |= self._drive(part, pin.index, word[pin.bit])
        return changed

    def cycle(self, top_words: np.ndarray) -> tuple[list[np.ndarray], int]:
        """One clock cycle: the chip's inputs (``top_words``, in ``top_index`` order) in, then rounds of evaluating
        the parts whose inputs changed (the top part first, then the parts it instantiates, with what it gave
        them) until nothing between them changes; returns every part's outputs before the edge and the number
        of rounds, then clocks the flip-flops and the macros."""
        self._drive(0, self.top_index, top_words)
        for m in self.srams:
            pin = m.outs["rdata"]
            self._drive(m.part, pin.index, _bits(m.rdata, m.width)[pin.bit])
        outs: list[np.ndarray] = [None] * len(self.sims)
        todo, rounds = list(range(len(self.sims))), 0
        while todo:
            rounds += 1
            if rounds > MAX_ROUNDS:
                raise ReplayError(f"the parts did not settle in {MAX_ROUNDS} rounds (still changing: "
                                  f"{[self.tops[k] for k in todo]}): a combinational loop between parts")
            pending, again = set(todo), set()
            for k in todo:
                pending.discard(k)
                self.sims[k].eval()
                outs[k] = self.sims[k].outputs()
                for j, (src, dst) in self.link_arrays[k].items():
                    if self._drive(j, dst, outs[k][src] & np.uint64(1)) and j not in pending:
                        again.add(j)
                if self._rom_reads(k, outs):
                    again.add(k)
            todo = sorted(again)
        if self.toggles is not None:
            for k, now in enumerate(outs):
                self.toggles[k] += (now ^ self._last[k]) & np.uint64(1)
            self.counted += 1
        self._last = outs
        for m in self.srams:
            self._clock_sram(m, outs)
        for sim in self.sims:
            sim.step()
        return outs, rounds

    def count_toggles(self) -> None:
        """From the next cycle on, count each output's changes from one cycle's settled value to the next."""
        if self._last is None:
            raise ReplayError("count_toggles before the first cycle: there is no value to count changes from")
        self.toggles = [np.zeros(len(o), dtype=np.uint64) for o in self._last]
        self.counted = 0

    def cell_toggles(self) -> dict[str, tuple[str, dict[str, int]]]:
        """Each library cell of the chip by its OpenSTA name (``core/mac/_12_``): its cell and its output pins'
        toggles since ``count_toggles``."""
        if self.toggles is None:
            raise ReplayError("no toggles were counted: build the Chip with cell_outputs and call count_toggles")
        found = {}
        for k, leaves in enumerate(self.leaves):
            counts = self.toggles[k]
            for name, pin in self.outs[k].items():
                inst, _, port = name.rpartition(".")
                if inst in leaves:
                    path, kind = leaves[inst]
                    found.setdefault(self.prefix[k] + path, (kind, {}))[1][port] = int(counts[pin.index[0]])
        return found

    @staticmethod
    def _clock_sram(m: Macro, outs: list[np.ndarray]) -> None:
        if m.ins["re"].value(outs):
            a = m.ins["raddr"].value(outs)
            m.rdata = m.words[a] if a < m.depth else 0
            m.reads += 1
        if m.ins["we"].value(outs):
            a = m.ins["waddr"].value(outs)
            if a < m.depth:
                strobe, data, word = m.ins["wstrb"].value(outs), m.ins["wdata"].value(outs), m.words[a]
                for b in range(m.width // 8):
                    if strobe >> b & 1:
                        word = word & ~(0xFF << 8 * b) | (data & 0xFF << 8 * b)
                m.words[a] = word
            m.writes += 1


def replay(chip: Chip, cycles: Cycles, log=print) -> dict:
    """Every cycle of ``cycles`` through ``chip``: the RTL's inputs in, every output bit compared with the RTL's
    (where it is known) from the first cycle after reset; stops at the first cycle that differs."""
    missing = sorted(set(chip.top_in) - set(cycles.bits))
    if missing:
        raise ReplayError(f"the trace lacks the chip inputs {missing}: record the top-level ports (--trace-depth 1)")
    words = np.concatenate([cycles.bits[n][:, p.bit] for n, p in chip.top_in.items()], axis=1).astype(np.uint64)
    reset = cycles.bits[RESET][:, 0] if RESET in cycles.bits else None
    if reset is None or not (reset == 0).any():
        raise ReplayError(f"the trace never asserts {RESET} (low): the netlist's state would not be defined")
    start = int(np.argmax(reset == 0))
    start += int(np.argmax(reset[start:] == 1))
    t0, last, worst, compared, first = time.monotonic(), time.monotonic(), 0, 0, None
    for t in range(cycles.n):
        outs, rounds = chip.cycle(words[t])
        worst = max(worst, rounds)
        if t == start and chip.counts_cells:
            chip.count_toggles()
        if t >= start:
            compared += 1
            bad = []
            for name, pin in chip.top_out.items():
                got = (outs[0][pin.index] & np.uint64(1)).astype(np.uint8)
                exp, known = cycles.bits[name][t, pin.bit], cycles.known[name][t, pin.bit]
                diff = pin.bit[np.nonzero(known & (got != exp))[0]]
                if len(diff):
                    bad.append({"port": name, "bits": diff[:SHOW_MISMATCHES].tolist(),
                                "netlist": hex(pin.value(outs)), "rtl": hex(_int(cycles.bits[name][t]))})
            if bad:
                first = {"cycle": t, "ports": bad}
                break
        if time.monotonic() - last > 10:
            last = time.monotonic()
            log(f"[replay] cycle {t + 1:,}/{cycles.n:,} ({(t + 1) / (last - t0):,.0f} cycles/s)")
    return {"cycles": cycles.n, "compared_from": start, "compared": compared, "equal": first is None,
            "first_difference": first, "max_rounds_per_cycle": worst, "run_s": round(time.monotonic() - t0, 1),
            "macros": {m.path: {"reads": m.reads, "writes": m.writes} for m in chip.macros if m.kind == "msh_sram"}}


def md_replay(r: dict | None, command: str) -> list[str]:
    """The report's section: what ran, how many cycles were compared and the verdict."""
    md = ["## Gate-level replay of the netlist", ""]
    if r is None:
        return md + [f"Not run: `{command}` runs the synthesised netlist (every part, the SPEC macros) through the "
                     "cycles of the RTL's short run and compares every output in every cycle.", ""]
    run = r.get("rtl_run") or {}
    verdict = (f"**equal to the RTL in all {r['compared']:,} cycles compared**" if r["equal"] else
               f"**differs from the RTL at cycle {r['first_difference']['cycle']:,}** "
               f"({', '.join(p['port'] for p in r['first_difference']['ports'])})")
    return md + [f"`{r['command']}`: the netlist's {len(r['parts'])} parts ({r['and_gates']:,} and-gates, "
                 f"{r['flip_flops']:,} flip-flops, the cells' liberty functions) with the SPEC macros, driven by the "
                 f"inputs of the RTL run {run.get('name', r['trace'])} ({r['cycles']:,} cycles"
                 + (", bit-exact" if run.get("bit_exact") else "") + f"): {verdict}, from cycle "
                 f"{r['compared_from']:,} (after reset). Graphs {r['graphs_s']:,.0f} s, replay {r['run_s']:,.0f} s.", ""]


def record_run(rtl_dir: Path, out: Path, seq_len: int | None = None) -> tuple[Path, dict]:
    """The RTL simulation of the chip's short run (SPEC §8's public seed, the ``short`` timing profile) with its
    top-level ports recorded into ``out/trace.vcd``; returns the trace and the run's report (bit-exact or not)."""
    from nano_k3.config import preset
    from rtl_gen import read_config, read_filelist
    from verification.chip_run import chip_sources, run_chip_sim, run_length
    from verification.chip_sim import SHORT_LEN, preset_of
    from verification.chip_tb import RunSpec

    cfg, _ = read_config(rtl_dir / "config.json")
    name = preset_of(cfg)
    run = RunSpec(seq_len=seq_len or run_length(preset(name), SHORT_LEN), profile="short", config=name)
    trace = out / "trace.vcd"
    trace.unlink(missing_ok=True)
    res = run_chip_sim("replay-rtl", chip_sources(read_filelist(rtl_dir / cfg["files"]["filelist"])), cfg["top"],
                       [run], rtl_dir=rtl_dir, build_dir=out / "rtl_sim", trace=trace)
    report = next(iter(res.reports.values()), None)
    if not res.passed or report is None or not trace.is_file():
        raise ReplayError(f"the RTL run {run.name} did not pass (or left no trace); see {res.log}")
    return trace, report


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m verification.replay", description=__doc__.split("\n\n")[0])
    ap.add_argument("--synth", type=Path, required=True, help="flow.synth folder of the chip (synth.json, parts)")
    ap.add_argument("--rtl", type=Path, required=True, help="the RTL folder it was synthesised from (ROM files)")
    ap.add_argument("--out", type=Path, default=REPO / "build" / "replay")
    ap.add_argument("--trace", type=Path, help="a VCD of the chip's top-level ports to replay (default: simulate "
                    "the RTL's short run and record one)")
    ap.add_argument("--seq-len", type=int, help="positions of the recorded run (default: the short run's)")
    ap.add_argument("--cell-models", type=Path, default=CELL_MODELS_OUT)
    args = ap.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    try:
        rtl_run = None
        if args.trace is None:
            print(f"[replay] RTL run with the top-level ports traced ({args.rtl}) ...", flush=True)
            args.trace, rtl_run = record_run(args.rtl.resolve(), args.out.resolve(), args.seq_len)
        rtl_s = time.monotonic() - t0
        cycles = read_cycles(args.trace)
        print(f"[replay] {args.trace}: {cycles.n:,} cycles", flush=True)
        t1 = time.monotonic()
        chip = Chip(args.synth, args.rtl.resolve(), args.out / "graphs", ensure_models(args.cell_models).verilog)
        graphs_s = time.monotonic() - t1
        rec = replay(chip, cycles)
    except ReplayError as e:
        print(f"verification.replay: error: {e}", file=sys.stderr)
        return 1
    rec.update({"synth": str(args.synth), "trace": str(args.trace), "parts": chip.tops, "rtl_run": rtl_run and {
        k: rtl_run.get(k) for k in ("name", "bit_exact", "cycles", "passed")}, "rtl_s": round(rtl_s, 1),
        "graphs_s": round(graphs_s, 1), "and_gates": sum(len(s.aig.ands) for s in chip.sims),
        "flip_flops": sum(len(s.aig.latches) for s in chip.sims),
        "command": "python -m verification.replay " + " ".join(argv if argv is not None else sys.argv[1:])})
    tmp = args.out / "replay.json.tmp"
    tmp.write_text(json.dumps(rec, indent=1) + "\n")
    tmp.replace(args.out / "replay.json")
    verdict = "equal to the RTL in every compared cycle" if rec["equal"] else \
        f"DIFFERS from the RTL at cycle {rec['first_difference']['cycle']}: {rec['first_difference']['ports']}"
    print(f"[replay] netlist ({len(chip.tops)} parts, {rec['and_gates']:,} and-gates, {rec['flip_flops']:,} "
          f"flip-flops): {rec['compared']:,} of {rec['cycles']:,} cycles compared, {verdict}; graphs "
          f"{graphs_s:.0f} s, replay {rec['run_s']:.0f} s")
    return 0 if rec["equal"] else 1


if __name__ == "__main__":
    sys.exit(main())
