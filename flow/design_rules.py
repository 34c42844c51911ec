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
from itertools import chain

import numpy as np

from flow.parasitics import RcModel, steiner_factor
from flow.place_flat import Floorplan, PinPoints, PinTable
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


def sink_caps(d: Design, caps: dict[tuple[str, str], float]) -> np.ndarray:
    """Per pin of ``d`` (PinTable order) the input capacitance (fF) it loads its net with, 0.0 for drivers and
    I/O pins; kept in ``d.derived()`` for this ``caps`` (flow/electrical.py ``resize_in_place`` updates it)."""
    cache = d.derived()
    if cache.get("sink_caps", (None,))[0] is not caps:
        n = len(PinTable.of(d).obj)
        cache["sink_caps"] = (caps, np.fromiter(
            (0.0 if p[5] or p[0] < 0 else caps.get((d.comp_master[p[0]], p[1]), 0.0)
             for p in chain.from_iterable(d.net_pins)), float, n))
    return cache["sink_caps"][1]


def check(d: Design, fp: Floorplan, xs, ys, orient, caps: dict[tuple[str, str], float],
          limits: dict[tuple[str, str], float], rc: RcModel, dbu: int, clock_nets: set[str]) -> RuleReport:
    """Every net of two pins or more but the clock's, its load and fanout against the limits (numpy over all
    pins at once: the sign-off checks a nano chip's two million nets several times)."""
    rep = RuleReport()
    pts = PinPoints.of(d, fp, xs, ys, orient)
    counts = np.diff(pts.start)
    sink_cap = sink_caps(d, caps)
    checked = counts >= 2
    checked[[k for k, name in enumerate(d.net_name) if name in clock_nets]] = False
    rep.nets_checked = int(checked.sum())
    box = pts.boxes()
    steiner = np.array([steiner_factor(n) if n else 0.0 for n in range(int(counts.max(initial=0)) + 1)])
    length = ((box[:, 2] - box[:, 0]) + (box[:, 3] - box[:, 1])) / dbu * steiner[counts]
    loads = np.zeros(len(counts))
    full = np.flatnonzero(counts > 0)
    loads[full] = np.add.reduceat(sink_cap, pts.start[full])
    loads += length * ((rc.c_h + rc.c_v) / 2)
    net_of = np.repeat(np.arange(len(counts)), counts)
    sinks = counts - np.bincount(net_of[pts.drives], minlength=len(counts))
    rep.fanout_violations = [{"net": d.net_name[k], "fanout": int(sinks[k])}
                             for k in np.flatnonzero(checked & (sinks > MAX_FANOUT))]
    port_limit = limits.get(DRIVING_CELL)
    floor = min([*limits.values(), MACRO_MAX_CAP_FF] + ([port_limit] if port_limit is not None else []))
    for i in np.flatnonzero(pts.drives & checked[net_of] & (loads[net_of] > floor)):   # the rest meet any limit
        k = int(net_of[i])
        obj, pin = d.net_pins[k][i - pts.start[k]][:2]
        if obj < 0:
            limit = port_limit
        elif obj >= d.n_std:
            limit = MACRO_MAX_CAP_FF
        else:
            limit = limits.get((d.comp_master[obj], pin))
        if limit is not None and loads[k] > limit:
            rep.cap_violations.append({"net": d.net_name[k], "load_ff": round(float(loads[k]), 2), "limit_ff": limit,
                                       "wire_um": round(float(length[k]), 1),
                                       "driver": "port" if obj < 0 else d.comp_name[obj] + "/" + pin})
    return rep
