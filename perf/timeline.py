"""The op timeline of one position, from the performance model (``PerfModel.position``).

    python -m perf.timeline [--config nano] [--group 128] [--position 0] [--png docs/figures/position_timeline.png]

Prints every micro-program op of position t in the order the sequencer runs it: its first cycle, its
cycles (waits included), the engine that executes it and its phase; ``--png`` draws the same as one bar
per op on the row of its engine. The times are the sequencer's: a matvec (MV) ends once its command is
queued, while the MAC array works through the queue and its results drain into the VRF behind the
following ops (perf/model.py), so an MV bar is the feed of its activations, not the array's work.
"""
from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path

from hw.kda_params import Sel as KdaSel
from hw.program import Op, Opc
from hw.vector_unit import EwOp
from perf.model import PerfModel, model_for

# op class -> the unit that executes it (hw/sequencer.py's block diagram), top to bottom in the figure
ENGINE = {Opc.EMB: "embedding fetch", Opc.PLD: "weight store -> PRF", Opc.MV: "MAC array", Opc.RMS: "norm unit",
          Opc.KDA: "KDA engine", Opc.MLA: "MLA engine", Opc.MIX: "residual mixer", Opc.ROUTE: "MoE router",
          Opc.EW: "element-wise unit", Opc.COMB: "combine unit", Opc.END: "memory engine (argmax word)"}


@dataclass(frozen=True)
class Step:
    index: int
    start: int
    cycles: int
    engine: str
    phase: str
    label: str


def label(op: Op) -> str:
    """What the op does, in a few words (the tensor, the KDA segment, the MLA words, the EW kind)."""
    if op.opc == Opc.KDA:
        return f"KDA {KdaSel(op.sel).name}" + (" + state update, output" if op.last else "")
    if op.opc == Opc.MLA:
        return f"MLA words {op.w0}..{op.w0 + op.nw - 1}" + (" + attention" if op.last else "")
    if op.opc == Opc.EW:
        return f"EW {EwOp(op.ewop).name}"
    if op.opc == Opc.MV and op.head:
        return "MV head -> logits writer"
    return f"{op.opc.name} {op.name}".strip()


def timeline(model: PerfModel, t: int) -> list[Step]:
    """Position t's ops with their start cycle (from the position's first op)."""
    out, now = [], 0
    for op, cost in zip(model.ops, model.position(t)):
        engine = "MAC array" if op.opc == Opc.MV and not op.head else ENGINE[op.opc]
        out.append(Step(cost.index, now, cost.cycles, engine, cost.phase, label(op)))
        now += cost.cycles
    return out


def table(steps: list[Step]) -> str:
    lines = [f"{'op':>3} {'start':>6} {'cycles':>6}  {'engine':<28} {'phase':<11} what", "-" * 86]
    lines += [f"{s.index:3d} {s.start:6d} {s.cycles:6d}  {s.engine:<28} {s.phase:<11} {s.label}" for s in steps]
    total = steps[-1].start + steps[-1].cycles
    lines.append(f"{len(steps)} ops, {total:,} cycles")
    by_engine: dict[str, int] = {}
    for s in steps:
        by_engine[s.engine] = by_engine.get(s.engine, 0) + s.cycles
    lines += [f"  {e:<28} {c:6,d} cycles ({100 * c / total:4.1f} %)"
              for e, c in sorted(by_engine.items(), key=lambda kv: -kv[1])]
    return "\n".join(lines)


def figure(steps: list[Step], title: str, path: Path) -> None:
    """One row per engine, one bar per op; the phases (perf.model.op_phase) named above the rows."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    rows = [e for e in ENGINE.values() if any(s.engine == e for s in steps)]
    colours = plt.get_cmap("tab20")(range(len(rows)))
    fig, ax = plt.subplots(figsize=(14, 5.2))
    for y, (engine, colour) in enumerate(zip(rows, colours)):
        bars = [(s.start, max(s.cycles, 1)) for s in steps if s.engine == engine]
        ax.broken_barh(bars, (y - 0.4, 0.8), facecolors=colour, edgecolor="black", linewidth=0.3)
    spans: list[list] = []
    for s in steps:
        if s.engine == ENGINE[Opc.PLD] and spans:         # a hoisted load belongs to a later phase: not a boundary
            spans[-1][2] = s.start + s.cycles
        elif spans and spans[-1][0] == s.phase:
            spans[-1][2] = s.start + s.cycles
        else:
            spans.append([s.phase, s.start, s.start + s.cycles])
    for k, (phase, a, b) in enumerate(spans):          # phase names above the rows, on three levels
        ax.axvline(a, color="grey", linewidth=0.3, linestyle=":")
        ax.text((a + b) / 2, -0.75 - 0.45 * (k % 3), phase, ha="center", va="center", fontsize=7)
    ax.set_yticks(range(len(rows)), rows, fontsize=8)
    ax.set_ylim(len(rows) - 0.4, -1.9)                  # first engine on top, the phases above it
    ax.set_xlim(0, steps[-1].start + steps[-1].cycles)
    ax.set_xlabel("cycle within the position (10 ns each at 100 MHz)")
    ax.set_ylabel("engine executing the op")
    ax.set_title(title, fontsize=10)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110, metadata={"Software": None})      # no version stamp: the same input, the same file
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m perf.timeline", description=__doc__.split("\n\n")[0])
    ap.add_argument("--config", default="nano", help="model and chip preset")
    ap.add_argument("--group", type=int, default=128, choices=(64, 128))
    ap.add_argument("--position", type=int, default=0, help="position t (the MLA attention grows with t)")
    ap.add_argument("--png", type=Path, help="also draw the timeline into this PNG")
    args = ap.parse_args(argv)
    model = model_for(args.config, args.group)
    if not 0 <= args.position < model.cfg.max_seq:
        ap.error(f"--position must be in 0..{model.cfg.max_seq - 1}, got {args.position}")
    steps = timeline(model, args.position)
    print(table(steps))
    if args.png:
        total = steps[-1].start + steps[-1].cycles
        figure(steps, f"{args.config}, group {args.group}, position {args.position}: {len(steps)} ops, {total:,} "
                      f"cycles (perf/model.py PerfModel.position; python -m perf.timeline --position "
                      f"{args.position} --png ...)", args.png)
        print(f"wrote {args.png}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
