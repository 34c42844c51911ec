"""Electrical design rules of a placed netlist: max capacitance and max fanout per net.

Debian's OpenSTA (2019) checks max transition (``report_check_types -max_transition``, flow/sta.py) but
has no max-capacitance or max-fanout check, so these two are counted here from the same data the SPEF
is written from: a net's load is its sinks' input capacitance (liberty) plus its estimated wire
(flow/parasitics.py: HPWL x Steiner factor x the mean of the two routing layers' capacitance per um),
compared with the driving pin's ``max_capacitance`` (liberty); its fanout is its number of sinks,
compared with ``MAX_FANOUT``. The ideal clock's net is not checked (a clock tree would drive it).
"""
from __future__ import annotations

from dataclasses import dataclass, field

from flow.parasitics import RcModel, steiner_factor
from flow.place_flat import Floorplan, pin_xy
from flow.place_netlist import Design
from flow.repair import pin_values
from flow.sta import DRIVING_CELL

MAX_FANOUT = 16               # synthesis buffers above this (flow/synth.py), repair trees stay below it
MACRO_MAX_CAP_FF = 100.0      # a fakeram45 output pin: the liberty of the macros gives no limit


def output_limits(liberty_text: str) -> dict[tuple[str, str], float]:
    """(cell, pin) -> max_capacitance (fF) of every output pin of a liberty."""
    return pin_values(liberty_text, "output", "max_capacitance")


@dataclass
class RuleReport:
    cap_violations: list[dict] = field(default_factory=list)
    fanout_violations: list[dict] = field(default_factory=list)
    nets_checked: int = 0

    def as_dict(self, shown: int = 10) -> dict:
        worst_cap = sorted(self.cap_violations, key=lambda v: v["load_ff"] / v["limit_ff"], reverse=True)
        worst_fo = sorted(self.fanout_violations, key=lambda v: -v["fanout"])
        return {"max_capacitance_violations": len(self.cap_violations),
                "max_fanout_violations": len(self.fanout_violations), "max_fanout": MAX_FANOUT,
                "nets_checked": self.nets_checked, "worst_capacitance": worst_cap[:shown],
                "worst_fanout": worst_fo[:shown],
                "model": "load = sink pin capacitance + HPWL x Steiner factor x wire capacitance per um; "
                         "the clock net is not checked (ideal clock)"}


def check(d: Design, fp: Floorplan, xs, ys, orient, caps: dict[tuple[str, str], float],
          limits: dict[tuple[str, str], float], rc: RcModel, dbu: int, clock_nets: set[str]) -> RuleReport:
    rep = RuleReport()
    c_um = (rc.c_h + rc.c_v) / 2
    port_limit = limits.get(DRIVING_CELL)
    for name, pins in zip(d.net_name, d.net_pins):
        if name in clock_nets or len(pins) < 2:
            continue
        rep.nets_checked += 1
        drivers = [p for p in pins if p[5]]
        sinks = len(pins) - len(drivers)
        pts = [pin_xy(d, fp, xs, ys, orient, p) for p in pins]
        px, py = [x for x, _ in pts], [y for _, y in pts]
        length = (max(px) - min(px) + max(py) - min(py)) / dbu * steiner_factor(len(pins))
        wire = length * c_um
        load = wire + sum(caps.get((d.comp_master[p[0]], p[1]), 0.0) for p in pins if not p[5] and p[0] >= 0)
        if sinks > MAX_FANOUT:
            rep.fanout_violations.append({"net": name, "fanout": sinks})
        for p in drivers:
            if p[0] < 0:
                limit = port_limit
            elif p[0] >= d.n_std:
                limit = MACRO_MAX_CAP_FF
            else:
                limit = limits.get((d.comp_master[p[0]], p[1]))
            if limit is not None and load > limit:
                rep.cap_violations.append({"net": name, "load_ff": round(load, 2), "limit_ff": limit,
                                           "wire_um": round(length, 1),
                                           "driver": "port" if p[0] < 0 else d.comp_name[p[0]] + "/" + p[1]})
    return rep
