"""Wire parasitics estimated from a placement (OpenROAD's ``estimate_parasitics -placement``, simplified),
written as SPEF for OpenSTA.

Model, per net:

* length: the half-perimeter of the pins' bounding box (HPWL) times Cheng's Steiner correction factor
  for its pin count (``steiner_factor``; 1.0 up to three pins, growing slowly above) - the expected length
  of a rectilinear Steiner tree over random pins with that bounding box;
* layers: horizontal wire on ``metal3`` and vertical wire on ``metal4``, the mid layers that carry most
  signal wiring in a six-to-ten layer stack; their resistance (RPERSQ / width) and capacitance
  (CPERSQDIST x width + 2 x EDGECAPACITANCE) per um come from the tech LEF (``RcModel.from_lef``);
* network: a star from the driver pin to every sink pin, each branch with the resistance of the
  Manhattan path between them; the net's total wire capacitance is shared equally among its pins.
  OpenSTA reduces it to a pi model plus Elmore delays per sink. Vias and coupling are not modelled;
* over a block macro: a macro's LEF ``OBS`` blocks its lower layers (fakeram45: metal1-metal4), so a wire
  cannot cross it on metal3/metal4. The share of a branch that runs over a placed macro (``MacroShadow``;
  the mean of the branch's two L-shaped routes) takes the resistance of the lowest horizontal / vertical
  layer above every macro's obstructions (metal5 / metal6: 1.5 ohm/um against metal3's 3.6). Its
  capacitance stays that of metal3/metal4, which is at least the upper layers' from the LEF (Nangate45's
  metal5 EDGECAPACITANCE is a tenth of its neighbours'; no smaller figure is taken from it).
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TextIO

from flow.lefdef import Lef

H_LAYER, V_LAYER = "metal3", "metal4"

# Cheng (1994) wire-length correction of HPWL for a net's Steiner tree, by pin count; linear above 50.
_STEINER = {1: 1.0, 2: 1.0, 3: 1.0, 4: 1.0828, 5: 1.1536, 6: 1.2206, 7: 1.2823, 8: 1.3385, 9: 1.3991, 10: 1.4493,
            11: 1.4974, 12: 1.5455, 13: 1.5937, 14: 1.6418, 15: 1.6899, 20: 1.8924, 25: 2.0743, 30: 2.2334,
            35: 2.3892, 40: 2.5337, 45: 2.6724, 50: 2.7886}


def _steiner(pins: int) -> float:
    if pins > 50:
        return 2.7886 + 0.02616 * (pins - 50)
    keys = sorted(_STEINER)
    lo = max(k for k in keys if k <= pins)
    hi = min(k for k in keys if k >= pins)
    if lo == hi:
        return _STEINER[lo]
    return _STEINER[lo] + (_STEINER[hi] - _STEINER[lo]) * (pins - lo) / (hi - lo)


# every net of a 1.6M-cell chip asks, several times: a table up to 50 pins (index 0 unused)
_STEINER_UPTO_50 = (0.0,) + tuple(_steiner(n) for n in range(1, 51))


def steiner_factor(pins: int) -> float:
    return _STEINER_UPTO_50[pins] if 0 < pins <= 50 else _steiner(pins)


@dataclass(frozen=True)
class RcModel:
    h_layer: str
    v_layer: str
    r_h: float     # ohm / um
    r_v: float
    c_h: float     # fF / um
    c_v: float
    over_layers: tuple[str, str] = ("", "")    # (horizontal, vertical) layer of a wire over a block macro
    r_h_over: float = 0.0
    r_v_over: float = 0.0

    @classmethod
    def from_lef(cls, lef: Lef, h_layer: str = H_LAYER, v_layer: str = V_LAYER) -> "RcModel":
        missing = [n for n in (h_layer, v_layer) if n not in lef.layers or not lef.layers[n].rpersq_ohm]
        if missing:
            raise ValueError(f"tech LEF lacks RESISTANCE RPERSQ / CAPACITANCE for layers {missing}")
        h, v = lef.layers[h_layer], lef.layers[v_layer]
        oh, ov = over_macro_layers(lef) or (h, v)
        return cls(h_layer, v_layer, h.r_ohm_per_um, v.r_ohm_per_um, h.c_ff_per_um, v.c_ff_per_um,
                   (oh.name, ov.name), oh.r_ohm_per_um, ov.r_ohm_per_um)

    def as_dict(self) -> dict:
        return {"horizontal_layer": self.h_layer, "vertical_layer": self.v_layer,
                "r_ohm_per_um": {self.h_layer: round(self.r_h, 5), self.v_layer: round(self.r_v, 5)},
                "c_ff_per_um": {self.h_layer: round(self.c_h, 6), self.v_layer: round(self.c_v, 6)},
                "over_macros": {"layers": list(self.over_layers),
                                "r_ohm_per_um": [round(self.r_h_over, 5), round(self.r_v_over, 5)],
                                "c": f"unchanged: {self.h_layer} / {self.v_layer}"},
                "length": "HPWL x Steiner factor (Cheng 1994)", "network": "star from the driver, C shared by pins"}


def over_macro_layers(lef: Lef):
    """(horizontal, vertical) routing layer with resistance data nearest above every layer that a block
    macro's OBS blocks, or None when no macro blocks a routing layer."""
    routing = [layer for layer in lef.layers.values() if layer.type == "ROUTING"]
    blocked = set().union(*(m.obs_layers for m in lef.masters.values() if m.cls.startswith("BLOCK")))
    top = max((k for k, layer in enumerate(routing) if layer.name in blocked), default=None)
    if top is None:
        return None
    above = [layer for layer in routing[top + 1:] if layer.rpersq_ohm and layer.width_um]
    h = next((layer for layer in above if layer.direction == "HORIZONTAL"), None)
    v = next((layer for layer in above if layer.direction == "VERTICAL"), None)
    if h is None or v is None:
        raise ValueError(f"the tech LEF has no horizontal and vertical routing layer with resistance above "
                         f"{routing[top].name}, the top layer that block macros obstruct")
    return h, v


def macro_rects(d, macro_xy: dict[int, tuple[int, int]], dbu: int) -> list[tuple[float, float, float, float]]:
    """The placed macros' rectangles (um) of a flow.place_netlist ``Design`` from the floorplan's macro
    positions (component index -> lower left, database units; macros are placed unrotated)."""
    return [(x / dbu, y / dbu, (x + d.comp_w[i]) / dbu, (y + d.comp_h[i]) / dbu) for i, (x, y) in macro_xy.items()]


class MacroShadow:
    """The placed block macros' rectangles (um), binned, for the length of a wire that runs over them."""
    BIN_UM = 100.0

    def __init__(self, rects: list[tuple[float, float, float, float]]):
        self.rects = rects
        self.bins: dict[tuple[int, int], list[int]] = {}
        for k, (x0, y0, x1, y1) in enumerate(rects):
            for bx in range(int(x0 // self.BIN_UM), int(x1 // self.BIN_UM) + 1):
                for by in range(int(y0 // self.BIN_UM), int(y1 // self.BIN_UM) + 1):
                    self.bins.setdefault((bx, by), []).append(k)

    def near(self, x0: float, y0: float, x1: float, y1: float) -> list[tuple[float, float, float, float]]:
        """The macros that share a bin with a box (lower left, upper right): all that it overlaps, and maybe
        a few more; in the order of ``rects``."""
        b = self.BIN_UM
        return [self.rects[k] for k in sorted({k for bx in range(int(x0 // b), int(x1 // b) + 1)
                                               for by in range(int(y0 // b), int(y1 // b) + 1)
                                               for k in self.bins.get((bx, by), ())})]

    @staticmethod
    def _h(rs, y: float, xa: float, xb: float) -> float:
        lo, hi = min(xa, xb), max(xa, xb)
        return sum(max(0.0, min(hi, x1) - max(lo, x0)) for x0, y0, x1, y1 in rs if y0 < y < y1)

    @staticmethod
    def _v(rs, x: float, ya: float, yb: float) -> float:
        lo, hi = min(ya, yb), max(ya, yb)
        return sum(max(0.0, min(hi, y1) - max(lo, y0)) for x0, y0, x1, y1 in rs if x0 < x < x1)

    def over(self, xa: float, ya: float, xb: float, yb: float, rs=None) -> tuple[float, float]:
        """(horizontal, vertical) um over macros of the Manhattan route from a to b: the mean of its two
        L shapes (horizontal first at ``ya``, then vertical at ``xb``; vertical first at ``xa``). ``rs``: the
        macros to look at, if known (``near`` of a box that holds a and b)."""
        if rs is None:
            rs = self.near(min(xa, xb), min(ya, yb), max(xa, xb), max(ya, yb))
        return ((self._h(rs, ya, xa, xb) + self._h(rs, yb, xa, xb)) / 2,
                (self._v(rs, xb, ya, yb) + self._v(rs, xa, ya, yb)) / 2)


@dataclass(frozen=True)
class NetPins:
    """A placed net: its name in the netlist, and per pin the SPEF node name, direction and position (um)."""
    name: str
    nodes: list[str | None]   # "inst:pin", a port name, or None: a pin OpenSTA does not see
    is_port: list[bool]
    is_driver: list[bool]
    x: list[float]
    y: list[float]


_SPECIAL = re.compile(r"[^A-Za-z0-9_]")
_BUS = re.compile(r"^(.*?)(\[\d+\])$")


# every ASCII character but letters, digits and '_' gets a backslash: str.translate is ten times faster than
# the regular expression, which stays for the rare name with other characters (a 1.7M-net SPEF escapes 13M)
_ESCAPE = {c: "\\" + chr(c) for c in range(128) if _SPECIAL.match(chr(c))}


def _esc(text: str) -> str:
    return text.translate(_ESCAPE) if text.isascii() else _SPECIAL.sub(r"\\\g<0>", text)


def spef_escape(name: str, flat: bool = False, bus: bool = True) -> str:
    """A netlist name as a SPEF identifier: hierarchy '/' kept, a trailing bus index kept, every other
    character that is not a letter, digit or '_' escaped with a backslash. ``flat``: the name of one object
    of a flat netlist, in which a '/' is part of the name and is escaped too; ``bus=False``: the name is
    an escaped Verilog scalar, whose brackets are escaped as well."""
    if flat:
        m = _BUS.match(name) if bus else None
        base, index = (m.group(1), m.group(2)) if m else (name, "")
        return _esc(base) + index
    parts = name.split("/")
    out = []
    for i, part in enumerate(parts):
        bus = ""
        m = _BUS.match(part) if i == len(parts) - 1 else None
        if m:
            part, bus = m.group(1), m.group(2)
        out.append(_esc(part) + bus)
    return "/".join(out)


def _flat_pin(node: str) -> str:
    """``inst:pin`` of a flat netlist as SPEF: each part one escaped identifier (``spef_escape(part, flat=True,
    bus=False)``, inlined: a nano SPEF has six million of them)."""
    inst, pin = node.rsplit(":", 1)
    return _esc(inst) + ":" + _esc(pin)


def spef_header(design: str) -> str:
    return (f'*SPEF "IEEE 1481-1998"\n*DESIGN "{design}"\n*DATE "-"\n*VENDOR "nano-K3"\n'
            f'*PROGRAM "flow.parasitics"\n*VERSION "1"\n*DESIGN_FLOW "PIN_CAP NONE"\n*DIVIDER /\n*DELIMITER :\n'
            f"*BUS_DELIMITER [ ]\n*T_UNIT 1 NS\n*C_UNIT 1 FF\n*R_UNIT 1 OHM\n*L_UNIT 1 HENRY\n\n")


def net_rc(net: NetPins, rc: RcModel, shadow: MacroShadow | None = None) -> tuple[float, float, list[float]]:
    """(wire length um, wire capacitance fF, per-pin branch resistance ohm from the driver); with
    ``shadow``, the branch lengths over its macros have the over-macro layers' resistance."""
    n = len(net.nodes)
    x0, y0, x1, y1 = min(net.x), min(net.y), max(net.x), max(net.y)
    dx, dy = x1 - x0, y1 - y0
    k = steiner_factor(n)
    length = (dx + dy) * k
    cap = (dx * rc.c_h + dy * rc.c_v) * k
    d = net.is_driver.index(True) if True in net.is_driver else 0
    xd, yd = net.x[d], net.y[d]
    res = [abs(net.x[i] - xd) * rc.r_h + abs(net.y[i] - yd) * rc.r_v for i in range(n)]
    rs = shadow.near(x0, y0, x1, y1) if shadow is not None else None     # every pin's route lies in the box
    if rs:
        for i in range(n):
            oh, ov = shadow.over(xd, yd, net.x[i], net.y[i], rs)
            res[i] -= oh * (rc.r_h - rc.r_h_over) + ov * (rc.r_v - rc.r_v_over)
    return length, cap, res


def write_dnet(f: TextIO, net: NetPins, rc: RcModel, flat: bool = False,
               shadow: MacroShadow | None = None) -> tuple[float, float]:
    """One *D_NET: an internal node ``<net>:1`` at the driver, a branch to every pin OpenSTA knows (``nodes``
    entries that are None, such as macro pins of the empty macro modules, count for the length only).
    ``flat``: names are those of a flat netlist (flow/repair.py ``write_verilog``): a net that reaches a
    port is named after the port bit, every other net and instance name is one escaped identifier.
    ``shadow``: the placed macros (``net_rc``). Returns (length um, capacitance fF)."""
    length, cap, res = net_rc(net, rc, shadow)
    seen = [i for i, nd in enumerate(net.nodes) if nd is not None]
    if not seen:
        return length, cap
    if flat:
        name = spef_escape(net.name, flat=True, bus=any(net.is_port))
        nodes = {i: spef_escape(net.nodes[i], flat=True) if net.is_port[i] else _flat_pin(net.nodes[i]) for i in seen}
    else:
        name = spef_escape(net.name)
        nodes = {i: spef_escape(net.nodes[i]) if net.is_port[i] else
                 ":".join(spef_escape(part) for part in net.nodes[i].rsplit(":", 1)) for i in seen}
    center = f"{name}:1"
    per_node = cap / (len(seen) + 1)
    f.write(f"*D_NET {name} {cap:.5f}\n*CONN\n")
    for i in seen:
        # a port that drives the net is an input of the design; a cell pin that drives it is an output
        io = ("I" if net.is_driver[i] else "O") if net.is_port[i] else ("O" if net.is_driver[i] else "I")
        f.write(f"*{'P' if net.is_port[i] else 'I'} {nodes[i]} {io}\n")
    f.write(f"*CAP\n1 {center} {per_node:.5f}\n")
    f.writelines(f"{k + 2} {nodes[i]} {per_node:.5f}\n" for k, i in enumerate(seen))
    f.write("*RES\n")
    f.writelines(f"{k + 1} {center} {nodes[i]} {max(res[i], 1e-3):.4f}\n" for k, i in enumerate(seen))
    f.write("*END\n\n")
    return length, cap
