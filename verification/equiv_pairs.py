"""Pairs for verification.equiv found by simulation: registers synthesis named after something else.

``equiv_make`` pairs gold and gate signals by name, and ``equiv_induct`` can only prove a register it has paired:
an unpaired one is a free variable in the induction step. Synthesis sometimes keeps a register under the name of
another RTL signal: the memory engine's read address ``rd_addr`` is held in flip-flops named ``$procmux_Y$20``,
which in the RTL is ``grant_rd ? rd_addr : mem__req_addr``. The gold has no register of that name (its
``rd_addr`` is left without a partner) and the ``reg$procmux_Y$20`` copy verification.equiv makes of the name pairs
a register with a multiplexer: false, so unprovable.

Before ``equiv_make`` both prepared designs are turned into and-inverter graphs (a copy each, ``write_aiger``) and
simulated side by side on the same random inputs (``CYCLES`` cycles after ``RESET_CYCLES`` of reset, 64 runs at once,
one bit per run in a 64-bit word), recording every flip-flop and every ``reg$`` copy per cycle: its signature.
- a ``reg$`` copy whose gold and gate signatures differ is a false pair: the gate's is renamed so it pairs nothing;
- a flip-flop of either side that pairs with no flip-flop of the other by name (a name both carry, with the same
  signature) is paired with one of the other side's flip-flops that has its signature: both get a wire
  ``pair$<k>``, which ``equiv_make`` pairs. Constant signatures are left alone (synthesis drops constant
  registers, and every constant would match every other).
Simulation only proposes: a pair that is not equal fails in ``equiv_induct`` and the part stays unproven, so the
proof is as sound as without them.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from verification.aig import Aig, AigSim, Bit, read_aig

MARK = "@@pair-by-simulation"        # the worker's cue (followed by a folder for the graphs)
CYCLES = 64
RESET_CYCLES = 2
SEED = 20261207
RESET_PORTS = ("rst",)
# The copy of a prepared design that write_aiger takes: the reg$ copies as outputs (so they are simulated), the
# flip-flops without enables or resets, undriven and x bits zero
AIG_PREP = ("expose w:reg$*", "async2sync", "memory_map", "setundef -undriven -zero", "setundef -zero", "opt_clean",
            "techmap", "opt -fast", "dffunmap", "aigmap", "setundef -zero", "opt_clean")

def stimulus(keys: list[Bit], seed: int = SEED) -> dict[Bit, np.ndarray]:
    """Random input words per cycle (64 runs each), the reset ports high for ``RESET_CYCLES`` and low after;
    drawn from the sorted names so both designs get the same."""
    rng = np.random.default_rng(seed)
    total = RESET_CYCLES + CYCLES
    out = {}
    for key in sorted(set(keys)):
        words = rng.integers(0, 2 ** 63, size=total, dtype=np.uint64) * np.uint64(2) + \
            rng.integers(0, 2, size=total, dtype=np.uint64)
        if key[0] in RESET_PORTS:
            words[:] = 0
            words[:RESET_CYCLES] = ~np.uint64(0)
        out[key] = words
    return out


def simulate(aig: Aig, stim: dict[Bit, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """Every latch's and output's value (64 runs a word) in each cycle after reset: arrays [latches, CYCLES] and
    [outputs, CYCLES]. Latches start at 0 (or their AIGER initial value), reset is held first."""
    sim = AigSim(aig)
    zero = np.zeros(RESET_CYCLES + CYCLES, dtype=np.uint64)
    words = np.array([stim.get(aig.input_names.get(i), zero) for i in range(len(aig.inputs))],
                     dtype=np.uint64).reshape(len(aig.inputs), -1)
    every = np.arange(len(aig.inputs))
    lat_trace = np.zeros((len(aig.latches), CYCLES), dtype=np.uint64)
    out_trace = np.zeros((len(aig.outputs), CYCLES), dtype=np.uint64)
    for t in range(RESET_CYCLES + CYCLES):
        sim.set(every, words[:, t])
        sim.eval()
        if t >= RESET_CYCLES:
            lat_trace[:, t - RESET_CYCLES] = sim.state
            out_trace[:, t - RESET_CYCLES] = sim.outputs()
        sim.step()
    return lat_trace, out_trace


def _usable(names: list[Bit], ref) -> str | None:
    """The Yosys reference (``ref``) of the first name a command can address the bit by: public, no brackets or
    spaces, the cell models' ``_123_.Q`` last."""
    ok = sorted((n for n in names if not n[0].startswith("$") and not set(n[0]) & set("[] ")),
                key=lambda n: ("_." in n[0], n[0]))
    return next((r for r in map(ref, ok) if r), None)


def wire_ref(module) -> callable:
    """A function from a map's (name, bit) (bit as declared: offset, maybe descending) to ``\\name[position]`` in
    the pyosys ``module``, or None when it has no such wire."""
    from pyosys import libyosys as ys

    def ref(bit: Bit) -> str | None:
        w = module.wire(ys.IdString("\\" + bit[0]))
        if w is None:
            return None
        pos = w.start_offset + w.width - 1 - bit[1] if w.upto else bit[1] - w.start_offset
        return f"\\{bit[0]}[{pos}]" if 0 <= pos < w.width else None
    return ref


def plan(gold: Aig, gate: Aig, gold_tr: tuple[np.ndarray, np.ndarray], gate_tr: tuple[np.ndarray, np.ndarray],
         refs: dict[str, callable]) -> tuple[list[str], list[tuple[str, str]]]:
    """From both designs' simulations (``simulate``): the gate's ``reg$`` copies whose signature differs from the
    gold's (false pairs), and the flip-flop pairs by signature (module docstring): (gold bit, gate bit) each."""
    sides = {}
    for name, aig, (lat, out) in (("gold", gold, gold_tr), ("gate", gate, gate_tr)):
        sig = [row.tobytes() for row in lat]
        const = [not row.any() or bool((row == ~np.uint64(0)).all()) for row in lat]
        by_name = {nb: i for i, names in aig.latch_names.items() for nb in names}
        outs = {aig.output_names[i]: out[i].tobytes() for i in range(len(out)) if i in aig.output_names}
        by_sig: dict[bytes, list[int]] = {}
        for i, s in enumerate(sig):
            if not const[i] and _usable(aig.latch_names.get(i, []), refs[name]):
                by_sig.setdefault(s, []).append(i)
        sides[name] = (aig, sig, const, by_name, outs, by_sig)
    g_aig, g_sig, g_const, g_by_name, g_outs, g_by_sig = sides["gold"]
    t_aig, t_sig, t_const, t_by_name, t_outs, t_by_sig = sides["gate"]
    false = sorted({n for (n, b), s in t_outs.items() if n.startswith("reg$") and g_outs.get((n, b)) != s})
    pairs = []
    for side, (aig, sig, const), (other, o_aig, o_sig, o_by_name, o_by_sig) in (
            ("gold", (g_aig, g_sig, g_const), ("gate", t_aig, t_sig, t_by_name, t_by_sig)),
            ("gate", (t_aig, t_sig, t_const), ("gold", g_aig, g_sig, g_by_name, g_by_sig))):
        for i, names in aig.latch_names.items():
            if const[i] or any(o_by_name.get(nb) is not None and o_sig[o_by_name[nb]] == sig[i]
                               for nb in names if nb[0] not in false):
                continue                          # constant, or paired by a name both carry
            partners = o_by_sig.get(sig[i])
            mine = _usable(names, refs[side])
            if partners and mine:
                theirs = _usable(o_aig.latch_names[partners[0]], refs[other])
                pairs.append((mine, theirs) if side == "gold" else (theirs, mine))
    return false, sorted(set(pairs))


def commands(false: list[str], pairs: list[tuple[str, str]]) -> list[str]:
    """Yosys commands for ``plan``'s result, on the design holding the modules gold and gate."""
    cmds = []
    for side in (0, 1):
        cmds.append(f"cd {('gold', 'gate')[side]}")
        for k, pair in enumerate(pairs):
            cmds += [f"add -wire \\pair${k} 1", f"connect -set \\pair${k} {pair[side]}"]
        cmds.append("cd")
    return cmds + ["cd gate", *(f"rename \\{n} \\false{n}" for n in false), "cd"]


def find(design, run_pass, folder: Path) -> tuple[list[str], dict]:
    """In the proof's Yosys: both designs (modules gold, gate) written as graphs into ``folder``, simulated and
    compared; returns the commands that rename false pairs and add the found ones, and their counts."""
    folder.mkdir(parents=True, exist_ok=True)
    run_pass("design -save pairs_before")
    graphs = {}
    for side in ("gold", "gate"):
        run_pass("design -load pairs_before")
        run_pass(f"hierarchy -top {side}")
        for cmd in AIG_PREP:
            run_pass(cmd)
        aag, sym = folder / f"{side}.aag", folder / f"{side}.map"
        run_pass(f"write_aiger -ascii -map {sym} {aag}")
        graphs[side] = read_aig(aag, sym)
    run_pass("design -load pairs_before")
    from pyosys import libyosys as ys
    refs = {side: wire_ref(design.module(ys.IdString("\\" + side))) for side in ("gold", "gate")}
    stim = stimulus([*graphs["gold"].input_names.values(), *graphs["gate"].input_names.values()])
    false, pairs = plan(graphs["gold"], graphs["gate"], simulate(graphs["gold"], stim), simulate(graphs["gate"], stim), refs)
    return commands(false, pairs), {"false_copies": false, "pairs_by_simulation": len(pairs)}
