"""Load isolation on the critical paths, in the sizing OpenSTA session (a part of OpenROAD's
``repair_timing``: rebuffering, simplified).

Sizing (flow/resize.py) stops where a stage's cell has no stronger size, or where a stronger size loads
the stage before it more than it helps: an ``XOR2_X2`` driving 70 fF of wire and pins takes about a
nanosecond at the slow corner. Here such a stage keeps only its critical sink (the next pin of the path)
and hands every other sink to a new buffer placed at those sinks' centre, so the critical stage drives
one sink and one buffer input; when the critical sink itself is far (``DRIVE_BUFFER_UM``) or alone, every
sink goes behind a buffer next to the driver, which then drives the wire. Per round:

1. the worst path to each of ``PATHS_PER_ROUND`` violating endpoints (``report_checks -fields
   {capacitance input_pins}``); a stage qualifies when it takes ``MIN_DELAY_NS`` or more with
   ``MIN_LOAD_FF`` or more of load, once per net;
2. the net's other sinks (not top-level ports) move to a ``BUF_Xn`` sized by their load (pins plus the
   estimated wire, ``LOAD_PER_DRIVE_FF`` per unit of drive, as flow/repair.py sizes its trees);
   ``make_instance`` / ``make_net`` / ``disconnect_pin`` / ``connect_pin`` (Debian's ``insert_buffer`` is
   broken);
3. OpenSTA drops a net's SPEF parasitics once its pins change, so both nets get their estimated wire
   capacitance from the placed positions (``set_load`` on the net: HPWL x Steiner factor x the mean
   capacitance per um of the two routing layers, the SPEF writer's model);
4. the round is kept when the worst slack improves (or stays and the TNS improves); otherwise every move
   is undone and the next round takes half as many candidates (the worst paths' first), until one alone fails (the buffers stay, unconnected, in the session only: this OpenSTA's ``delete_instance``
   fails, and nothing unconnected reaches the netlist).

``apply`` makes the kept moves in the Yosys JSON module, and ``positions`` gives each new buffer its
starting place for re-legalisation; the sign-off STA then times the result with a fresh SPEF.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

from flow.parasitics import steiner_factor
from flow.sta_session import StaSession
from pdk_config.nangate45 import DONT_USE

PATHS_PER_ROUND = 200
MIN_DELAY_NS = 0.25
MIN_LOAD_FF = 15.0
LOAD_PER_DRIVE_FF = 10.0
DRIVE_BUFFER_UM = 100.0         # a critical sink this far from its driver goes behind the buffer too
MAX_ROUNDS = 60               # rounds take a second or two on the nano chip; each must improve to be kept
BUFFERS = tuple(f"BUF_X{n}" for n in (1, 2, 4, 8, 16, 32))
DEFAULT_PIN_CAP_FF = 2.0
MIN_GAIN_NS = 1e-3              # a turn of isolation and sizing that gains less ends the repair

# "  70.1234   0.8536   2.7573 ^ core/mla/_441703_/Z (XOR2_X2)" (driver, with its load) or
# "           0.0001   1.5062 v core/mla/_441704_/B2 (AOI21_X4)" (input pin, no load)
_LINE = re.compile(r"^\s+(?:(\d[\d.]*)\s+)?(-?[\d.]+)\s+(-?[\d.]+)\s+[\^v]\s+(\S+)/(\w+)\s+\((\w+)\)\s*$")
_PIN = re.compile(r"^PIN (\S+) (input|output|bidirect)$", re.M)


@dataclass(frozen=True)
class Candidate:
    driver: str            # inst/pin of the stage's output
    critical: str          # inst/pin of the next stage's input on the path
    load_ff: float
    delay_ns: float


@dataclass
class Move:
    driver: str            # inst/pin of the output that drove the moved sinks and now drives the buffer
    buffer: str
    master: str
    net: str               # the buffer's output net
    moved: list[str]       # inst/pin of every sink moved onto it
    xy: tuple[float, float]


@dataclass
class RebufferResult:
    moves: list[Move] = field(default_factory=list)
    rounds: list[dict] = field(default_factory=list)

    def as_dict(self, areas: dict[str, float]) -> dict:
        by = {}
        for m in self.moves:
            by[m.master] = by.get(m.master, 0) + 1
        return {"buffers_added": len(self.moves), "sinks_moved": sum(len(m.moved) for m in self.moves),
                "area_added_um2": round(sum(areas.get(m.master, 0.0) for m in self.moves), 3),
                "added_by_size": dict(sorted(by.items())), "rounds": self.rounds,
                "min_delay_ns": MIN_DELAY_NS, "min_load_ff": MIN_LOAD_FF}


def candidates(report: str) -> list[Candidate]:
    """Stages of a ``report_checks -fields {capacitance input_pins}`` report that qualify, once per driver."""
    out, seen = [], set()
    for block in re.split(r"\n(?=Startpoint:)", report):
        lines = [m for m in map(_LINE.match, block.splitlines()) if m]
        for k, m in enumerate(lines[:-1]):
            nxt = lines[k + 1]
            if m.group(1) is None or nxt.group(1) is not None:
                continue
            load, delay = float(m.group(1)), float(m.group(2))
            drv = f"{m.group(4)}/{m.group(5)}"
            if delay >= MIN_DELAY_NS and load >= MIN_LOAD_FF and drv not in seen:
                seen.add(drv)
                out.append(Candidate(drv, f"{nxt.group(4)}/{nxt.group(5)}", load, delay))
    return out


def _pin(name: str) -> str:
    """``name`` (inst/pin) as a get_pins pattern that matches only itself."""
    inst, pin = name.rsplit("/", 1)
    esc = (lambda t: t.replace("[", "\\[").replace("]", "\\]"))
    return "{" + esc(inst).replace("/", "\\/") + "/" + esc(pin) + "}"


class Rebuffer:
    """The session's edits, with the geometry and liberty data that size the buffers and estimate wires."""

    def __init__(self, sta: StaSession, cell_xy: dict[str, tuple[float, float]], cell_type: dict[str, str],
                 caps: dict[tuple[str, str], float], c_per_um: float, taken: set[str]):
        self.sta, self.cell_xy, self.cell_type, self.caps, self.c_per_um = sta, cell_xy, cell_type, caps, c_per_um
        self.taken, self.serial = taken, 0
        self.buffers = [b for b in BUFFERS if b not in DONT_USE and (b, "A") in caps]

    def _name(self) -> tuple[str, str]:
        while f"rebuf_{self.serial}" in self.taken:
            self.serial += 1
        name = f"rebuf_{self.serial}"
        self.taken.add(name)
        self.serial += 1
        return name, f"rebuf_net_{self.serial - 1}"

    def _xy(self, pin: str) -> tuple[float, float] | None:
        return self.cell_xy.get(pin.rsplit("/", 1)[0]) if "/" in pin else None

    def _pin_cap(self, pin: str) -> float:
        inst, p = pin.rsplit("/", 1)
        return self.caps.get((self.cell_type.get(inst, ""), p), DEFAULT_PIN_CAP_FF)

    def wire_ff(self, pts: list[tuple[float, float]]) -> float:
        if len(pts) < 2:
            return 0.0
        xs, ys = [p[0] for p in pts], [p[1] for p in pts]
        return (max(xs) - min(xs) + max(ys) - min(ys)) * steiner_factor(len(pts)) * self.c_per_um

    def sinks(self, driver: str) -> tuple[str, list[str]]:
        """(net name, input pins) of the net ``driver`` drives."""
        text = self.sta.run(f"set n [get_nets -of_objects [get_pins {_pin(driver)}]]\nputs \"NET [get_full_name $n]\"\n"
                            "foreach p [get_pins -of_objects $n] { puts \"PIN [get_full_name $p] "
                            "[get_property $p direction]\" }")
        net = re.search(r"^NET (\S+)$", text, re.M)
        return (net.group(1) if net else ""), [m.group(1) for m in _PIN.finditer(text) if m.group(2) == "input"]

    def isolate(self, c: Candidate) -> Move | None:
        """A new buffer for the sinks of ``c``'s net (top-level ports and macro bus pins stay on the driver):
        every other sink, at their centre, when the critical sink is near the driver; all of them, next to
        the driver, when the critical sink is ``DRIVE_BUFFER_UM`` or more away or the only one (the buffer
        then drives the long wire in the critical stage's place)."""
        net, pins = self.sinks(c.driver)
        movable = [p for p in pins if "/" in p and "[" not in p.rsplit("/", 1)[1] and self._xy(p) is not None]
        drv_xy, crit_xy = self._xy(c.driver), self._xy(c.critical)
        if not net or not movable or drv_xy is None:
            return None
        others = [p for p in movable if p != c.critical]
        far = crit_xy is None or abs(crit_xy[0] - drv_xy[0]) + abs(crit_xy[1] - drv_xy[1]) >= DRIVE_BUFFER_UM
        moved = movable if far or not others else others
        pts = [self._xy(p) for p in moved]
        at = drv_xy if moved is movable else (sum(p[0] for p in pts) / len(pts), sum(p[1] for p in pts) / len(pts))
        load = self.wire_ff(pts + [at]) + sum(self._pin_cap(p) for p in moved)
        master = next((b for b in self.buffers if load <= LOAD_PER_DRIVE_FF * int(b.rsplit("X", 1)[1])),
                      self.buffers[-1])
        buf, new = self._name()
        kept = [drv_xy, at] + [self._xy(p) for p in pins if p not in moved and self._xy(p) is not None]
        lines = [f"set n [get_nets -of_objects [get_pins {_pin(c.driver)}]]",
                 f"make_instance {buf} [get_lib_cells */{master}]", f"make_net {new}"]
        lines += [f"disconnect_pin $n [get_pins {_pin(p)}]" for p in moved]
        lines += [f"connect_pin $n {buf}/A", f"connect_pin {new} {buf}/Z"]
        lines += [f"connect_pin {new} [get_pins {_pin(p)}]" for p in moved]
        lines += [f"set_load {self.wire_ff(kept):.4f} $n", f"set_load {self.wire_ff(pts + [at]):.4f} [get_nets {new}]"]
        self.sta.run("\n".join(lines))
        self.cell_xy[buf], self.cell_type[buf] = at, master
        return Move(c.driver, buf, master, new, moved, at)

    def undo(self, m: Move, pins_before: list[str]) -> None:
        lines = [f"set n [get_nets -of_objects [get_pins {_pin(m.driver)}]]"]
        lines += [f"disconnect_pin {m.net} [get_pins {_pin(p)}]" for p in m.moved]
        lines += [f"disconnect_pin {m.net} {m.buffer}/Z", f"disconnect_pin $n {m.buffer}/A"]
        lines += [f"connect_pin $n [get_pins {_pin(p)}]" for p in m.moved]
        pts = [self._xy(m.driver)] + [self._xy(p) for p in pins_before if self._xy(p) is not None]
        lines.append(f"set_load {self.wire_ff(pts):.4f} $n")
        self.sta.run("\n".join(lines))


def rebuffer(rb: Rebuffer, measure, wns: float, tns: float, target_ns: float = 0.0,
             progress=lambda msg: None) -> tuple[RebufferResult, float, float]:
    """Rounds of load isolation while they help (see the module's docstring). ``measure()`` gives the
    session's (worst slack, TNS) in ns. Returns the kept moves and the final (wns, tns)."""
    res = RebufferResult()
    limit = PATHS_PER_ROUND                  # candidates a round takes, worst paths first; halved when one fails
    for k in range(1, MAX_ROUNDS + 1):
        if wns >= target_ns:
            break
        report = rb.sta.run(f"report_checks -path_delay max -group_count {PATHS_PER_ROUND} -endpoint_count 1 "
                            f"-slack_max {target_ns} -fields {{capacitance input_pins}} -digits 4")
        done = {m.buffer for m in res.moves}
        cands = [c for c in candidates(report) if c.driver.rsplit("/", 1)[0] not in done][:limit]
        made = []
        for c in cands:
            _, before = rb.sinks(c.driver)
            m = rb.isolate(c)
            if m:
                made.append((m, before))
        if not made:
            res.rounds.append({"round": k, "candidates": len(cands), "buffers": 0})
            break
        new_wns, new_tns = measure()
        kept = new_wns > wns + 1e-4 or (new_wns >= wns - 1e-4 and new_tns > tns + 1e-3)
        res.rounds.append({"round": k, "candidates": len(cands), "buffers": len(made), "kept": kept,
                           "wns_ns": round(new_wns, 4), "tns_ns": round(new_tns, 3)})
        progress(f"rebuffer round {k}: {len(made):,} stages isolated, worst slack {new_wns:+.3f} ns, TNS "
                 f"{new_tns:,.1f} ns ({'kept' if kept else 'undone'})")
        if not kept:
            for m, before in reversed(made):
                rb.undo(m, before)
            if len(cands) == 1:
                break
            limit = max(1, len(cands) // 2)
            continue
        res.moves += [m for m, _ in made]
        wns, tns = new_wns, new_tns
    return res, wns, tns


def replay(sta: StaSession, res: RebufferResult) -> None:
    """The kept moves of ``res`` in another session of the same netlist (the hold corner's); its wires come
    from its own SPEF until a net is changed, then from nothing: hold is checked with pin loads only there."""
    for m in res.moves:
        lines = [f"set n [get_nets -of_objects [get_pins {_pin(m.driver)}]]",
                 f"make_instance {m.buffer} [get_lib_cells */{m.master}]", f"make_net {m.net}"]
        lines += [f"disconnect_pin $n [get_pins {_pin(p)}]" for p in m.moved]
        lines += [f"connect_pin $n {m.buffer}/A", f"connect_pin {m.net} {m.buffer}/Z"]
        lines += [f"connect_pin {m.net} [get_pins {_pin(p)}]" for p in m.moved]
        sta.run("\n".join(lines))


def apply(module: dict, res: RebufferResult, key_of: dict[str, str]) -> None:
    """The kept moves of ``res`` in the flat Yosys JSON ``module`` (edited in place)."""
    cells = module["cells"]
    next_bit = 1 + max(b for c in cells.values() for bits in c["connections"].values() for b in bits
                       if isinstance(b, int))
    for m in res.moves:
        inst, pin = m.driver.rsplit("/", 1)
        bus = re.fullmatch(r"(\w+)\[(\d+)\]", pin)                 # a macro's data bit: rdata[3]
        conn = cells[key_of[inst]]["connections"]
        old = conn[bus.group(1)][int(bus.group(2))] if bus else conn[pin][0]
        cells[m.buffer] = {"hide_name": 0, "type": m.master, "parameters": {}, "attributes": {},
                           "port_directions": {"A": "input", "Z": "output"},
                           "connections": {"A": [old], "Z": [next_bit]}}
        module["netnames"][m.net] = {"hide_name": 0, "bits": [next_bit], "attributes": {}}
        for p in m.moved:
            inst, pin = p.rsplit("/", 1)
            conn = cells[key_of[inst]]["connections"][pin]
            if conn[0] != old:
                raise ValueError(f"rebuffer: {p} is on bit {conn[0]}, not on {m.buffer}'s input net (bit {old}, "
                                 f"driven by {m.driver})")
            conn[0] = next_bit
        key_of[m.buffer] = m.buffer
        next_bit += 1
