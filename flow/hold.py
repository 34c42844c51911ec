"""Hold repair at the fast corner: delay buffers in front of the data pins whose hold check fails.

With an ideal clock the hold checks that fail are flip-flop to flip-flop paths through little or no
logic, at the fast corner, by the hold uncertainty. Each round asks the OpenSTA session (loaded at the
fast corner, with the sign-off uncertainty) for every failing endpoint and puts one ``HOLD_BUFFER``
between the endpoint's pin and its net (``make_instance``, ``make_net``, ``disconnect_pin``,
``connect_pin``; Debian's ``insert_buffer`` is broken); an endpoint that still fails gets another one in
the next round. The buffer's own net is new to STA and carries only pin capacitance: it sits next to its
sink. ``apply`` makes the same edits in the Yosys JSON module, so the written netlist is what was timed.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

from flow.sta_session import StaSession

HOLD_BUFFER = "BUF_X1"
MAX_ROUNDS = 8
_END = re.compile(r"^(\S+)/(\w+) \((\w+)\)\s+(-?[\d.]+)\s+(-?[\d.]+)\s+(-?[\d.]+) \(VIOLATED\)", re.M)


@dataclass
class HoldResult:
    inserted: list[tuple[str, str, str]] = field(default_factory=list)   # (buffer, instance, pin), in order
    rounds: list[dict] = field(default_factory=list)
    worst_ns: float | None = None

    def as_dict(self, areas: dict[str, float]) -> dict:
        return {"buffers_added": len(self.inserted), "buffer": HOLD_BUFFER,
                "area_added_um2": round(len(self.inserted) * areas.get(HOLD_BUFFER, 0.0), 3),
                "endpoints": len({(i, p) for _, i, p in self.inserted}), "rounds": self.rounds,
                "worst_hold_slack_after_ns": self.worst_ns}


def violations(sta: StaSession) -> list[tuple[str, str, float]]:
    """(instance, pin, slack ns) of every failing hold check at a cell pin (output ports are not fixed here)."""
    text = sta.run("report_checks -path_delay min -group_count 1000000 -endpoint_count 1 -slack_max 0 "
                   "-format end -digits 4")
    return [(m.group(1), m.group(2), float(m.group(6))) for m in _END.finditer(text)]


def _tcl_pin(inst: str, pin: str) -> str:
    return "{" + inst.replace("/", "\\/") + "/" + pin + "}"


def fix_hold(sta: StaSession, taken: set[str], progress=lambda msg: None) -> HoldResult:
    res = HoldResult()
    serial = 0
    for k in range(1, MAX_ROUNDS + 1):
        bad = violations(sta)
        res.worst_ns = min((s for *_, s in bad), default=None)
        if not bad:
            break
        lines = []
        for inst, pin, _ in bad:
            while f"hold_buf_{serial}" in taken:
                serial += 1
            buf, net = f"hold_buf_{serial}", f"hold_net_{serial}"
            taken.add(buf)
            serial += 1
            lines += [f"set p [get_pins {_tcl_pin(inst, pin)}]", "set n [get_nets -of_objects $p]",
                      f"make_instance {buf} [get_lib_cells */{HOLD_BUFFER}]", f"make_net {net}",
                      "disconnect_pin $n $p", f"connect_pin $n {buf}/A", f"connect_pin {net} {buf}/Z",
                      f"connect_pin {net} [get_full_name $p]"]
            res.inserted.append((buf, inst, pin))
        sta.run("\n".join(lines))
        res.rounds.append({"round": k, "failing_endpoints": len(bad), "worst_ns": res.worst_ns})
        progress(f"hold round {k}: {len(bad):,} failing endpoints (worst {res.worst_ns:+.4f} ns), one "
                 f"{HOLD_BUFFER} each")
    else:
        bad = violations(sta)
        res.worst_ns = min((s for *_, s in bad), default=None)
    return res


def apply(module: dict, res: HoldResult, key_of: dict[str, str]) -> None:
    """The buffers of ``res`` in the flat Yosys JSON ``module`` (edited in place), in insertion order."""
    cells = module["cells"]
    next_bit = 1 + max(b for c in cells.values() for bits in c["connections"].values() for b in bits
                       if isinstance(b, int))
    for buf, inst, pin in res.inserted:
        conn = cells[key_of[inst]]["connections"]
        old = conn[pin][0]
        cells[buf] = {"hide_name": 0, "type": HOLD_BUFFER, "parameters": {}, "attributes": {},
                      "port_directions": {"A": "input", "Z": "output"},
                      "connections": {"A": [old], "Z": [next_bit]}}
        module["netnames"][buf.replace("hold_buf_", "hold_net_")] = {"hide_name": 0, "bits": [next_bit],
                                                                      "attributes": {}}
        conn[pin] = [next_bit]
        key_of[buf] = buf
        next_bit += 1
