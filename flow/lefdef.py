"""Just enough LEF reading and DEF writing for placement: sites, routing layers with their RC, cell and
macro footprints with pin positions; a placed DEF (DIEAREA, ROW, COMPONENTS, PINS, NETS).

LEF units are microns; everything handed to the placer is in DEF database units (``Tech.dbu`` per um,
2000 for Nangate45), so that every LEF coordinate (a 0.005 um manufacturing grid) is an integer.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Iterator, TextIO


class LefError(RuntimeError):
    """A LEF file is missing or lacks a statement placement needs."""


@dataclass
class Layer:
    name: str
    type: str = ""
    direction: str = ""
    pitch_um: float = 0.0
    width_um: float = 0.0
    rpersq_ohm: float = 0.0            # RESISTANCE RPERSQ, ohm per square
    cpersqdist_pf_um2: float = 0.0     # CAPACITANCE CPERSQDIST, pF per um^2 of wire area
    edgecap_pf_um: float = 0.0         # EDGECAPACITANCE, pF per um of wire edge

    @property
    def r_ohm_per_um(self) -> float:
        """Resistance of a minimum-width wire per um of length."""
        return self.rpersq_ohm / self.width_um

    @property
    def c_ff_per_um(self) -> float:
        """Capacitance to ground of a minimum-width wire per um: area term plus both edges (LEF 5.8 model)."""
        return (self.cpersqdist_pf_um2 * self.width_um + 2 * self.edgecap_pf_um) * 1e3


@dataclass
class Site:
    name: str
    width_um: float = 0.0
    height_um: float = 0.0


@dataclass
class Pin:
    name: str
    direction: str = "INPUT"
    use: str = "SIGNAL"
    layer: str = ""
    rects: list[tuple[float, float, float, float]] = field(default_factory=list)

    @cached_property
    def center_um(self) -> tuple[float, float]:
        """Centre of the pin's largest rectangle (its access point for wire length estimates), computed
        at its first use once the LEF is read (placement asks for it per instance pin, millions of times)."""
        if not self.rects:
            return 0.0, 0.0
        x0, y0, x1, y1 = max(self.rects, key=lambda r: (r[2] - r[0]) * (r[3] - r[1]))
        return (x0 + x1) / 2, (y0 + y1) / 2


@dataclass
class Master:
    """A standard cell or a block macro."""
    name: str
    cls: str = ""
    width_um: float = 0.0
    height_um: float = 0.0
    pins: dict[str, Pin] = field(default_factory=dict)
    obs_layers: set[str] = field(default_factory=set)    # layers its OBS statements block


@dataclass
class Lef:
    dbu: int = 0
    sites: dict[str, Site] = field(default_factory=dict)
    layers: dict[str, Layer] = field(default_factory=dict)
    masters: dict[str, Master] = field(default_factory=dict)


BLOCKS = {"MACRO", "PIN", "LAYER", "SITE", "PORT", "OBS", "UNITS", "PROPERTYDEFINITIONS", "VIA", "VIARULE",
          "NONDEFAULTRULE", "BEGINEXT"}


def _statements(text: str) -> Iterator[tuple[bool, list[str]]]:
    """(is a block line, tokens): every ';'-terminated statement, and every block opener / ``END`` line."""
    buf: list[str] = []
    for raw in text.splitlines():
        toks = raw.split("#")[0].replace(";", " ; ").split()
        if not toks:
            continue
        if not buf and ";" not in toks and (toks[0] in BLOCKS or toks[0] == "END"):
            yield True, toks
            continue
        for t in toks:
            if t == ";":
                yield False, buf
                buf = []
            else:
                buf.append(t)


def _f(tok: str) -> float:
    return float(tok)


# Statement handlers by (enclosing block, first token). Each receives (lef, block object, tokens).
def _units(lef, _, t):
    if t[:2] == ["DATABASE", "MICRONS"]:
        lef.dbu = int(_f(t[2]))


def _layer_rc(lef, layer: Layer, t):
    # Cut layers state a plain "RESISTANCE r" per via; only the routing layers' per-square values are kept.
    attr = {("RESISTANCE", "RPERSQ"): "rpersq_ohm", ("CAPACITANCE", "CPERSQDIST"): "cpersqdist_pf_um2"}.get(tuple(t[:2]))
    if attr:
        setattr(layer, attr, _f(t[2]))


HANDLERS = {
    ("UNITS", "DATABASE"): _units,
    ("LAYER", "TYPE"): lambda lef, o, t: setattr(o, "type", t[1]),
    ("LAYER", "DIRECTION"): lambda lef, o, t: setattr(o, "direction", t[1]),
    ("LAYER", "RESISTANCE"): _layer_rc,
    ("LAYER", "CAPACITANCE"): _layer_rc,
    ("LAYER", "PITCH"): lambda lef, o, t: setattr(o, "pitch_um", _f(t[1])),
    ("LAYER", "WIDTH"): lambda lef, o, t: setattr(o, "width_um", _f(t[1])) if len(t) == 2 else None,
    ("LAYER", "EDGECAPACITANCE"): lambda lef, o, t: setattr(o, "edgecap_pf_um", _f(t[1])),
    ("SITE", "SIZE"): lambda lef, o, t: (setattr(o, "width_um", _f(t[1])), setattr(o, "height_um", _f(t[3]))),
    ("MACRO", "CLASS"): lambda lef, o, t: setattr(o, "cls", " ".join(t[1:])),
    ("MACRO", "SIZE"): lambda lef, o, t: (setattr(o, "width_um", _f(t[1])), setattr(o, "height_um", _f(t[3]))),
    ("PIN", "DIRECTION"): lambda lef, o, t: setattr(o, "direction", t[1]),
    ("PIN", "USE"): lambda lef, o, t: setattr(o, "use", t[1]),
    ("PORT", "LAYER"): lambda lef, o, t: setattr(o, "layer", o.layer or t[1]),
    ("PORT", "RECT"): lambda lef, o, t: o.rects.append(tuple(_f(x) for x in t[-4:])),
    ("OBS", "LAYER"): lambda lef, o, t: o.obs_layers.add(t[1]),
}


def read_lef(path: Path, lef: Lef | None = None) -> Lef:
    """Add the contents of one LEF file to ``lef`` (a new one by default)."""
    if not Path(path).is_file():
        raise LefError(f"LEF file {path} not found")
    lef = lef or Lef()
    stack: list[tuple[str, object]] = []          # (block kind, the object statements inside it fill)
    for is_block, t in _statements(Path(path).read_text()):
        head = t[0]
        if is_block and head == "END":
            if stack:
                stack.pop()
            continue
        if is_block:
            obj = _open_block(lef, stack, head, t[1] if len(t) > 1 else "")
            stack.append((head, obj))
            continue
        if stack:
            kind, obj = stack[-1]
            handler = HANDLERS.get((kind, head))
            if handler and obj is not None:
                handler(lef, obj, t)
    return lef


def _open_block(lef: Lef, stack, kind: str, name: str):
    parent = stack[-1][1] if stack else None
    if kind == "LAYER" and not stack:
        return lef.layers.setdefault(name, Layer(name))
    if kind == "SITE" and not stack:
        return lef.sites.setdefault(name, Site(name))
    if kind == "MACRO":
        lef.masters[name] = Master(name)
        return lef.masters[name]
    if kind == "PIN" and isinstance(parent, Master):
        parent.pins[name] = Pin(name)
        return parent.pins[name]
    if kind == "PORT" and isinstance(parent, Pin):
        return parent                               # rectangles of the pin's ports accumulate on the pin
    if kind == "OBS" and isinstance(parent, Master):
        return parent                               # the layers a macro blocks (wires cross it above them)
    if kind == "UNITS":
        return lef
    return None                                     # VIA, ...: nothing placement needs


# ---------------------------------------------------------------------------------------------- DEF

@dataclass(frozen=True)
class DefComponent:
    name: str
    master: str
    x: int
    y: int
    orient: str
    fixed: bool = False


@dataclass(frozen=True)
class DefPin:
    name: str
    net: str
    direction: str           # INPUT / OUTPUT / INOUT
    layer: str
    x: int
    y: int
    half: int                # half side of the square pin shape, dbu


@dataclass(frozen=True)
class DefRow:
    name: str
    site: str
    x: int
    y: int
    orient: str
    num_x: int
    step_x: int


def _def_name(name: str) -> str:
    # DEF names end at white space and ';'; escape the few characters that would break a statement.
    return name.replace("\\", "\\\\").replace(";", "\\;").replace(" ", "\\ ")


def write_def(path: Path, design: str, dbu: int, die: tuple[int, int, int, int], rows: list[DefRow],
              components: list[DefComponent], pins: list[DefPin],
              nets: list[tuple[str, list[tuple[str, str]]]]) -> None:
    """A DEF 5.8 file; a net's connections are (component, pin) pairs, component ``PIN`` meaning a port."""
    with open(path, "w") as f:
        _write_def(f, design, dbu, die, rows, components, pins, nets)


def _write_def(f: TextIO, design, dbu, die, rows, components, pins, nets) -> None:
    n = _def_name
    f.write(f'VERSION 5.8 ;\nDIVIDERCHAR "/" ;\nBUSBITCHARS "[]" ;\nDESIGN {n(design)} ;\n'
            f"UNITS DISTANCE MICRONS {dbu} ;\n\nDIEAREA ( {die[0]} {die[1]} ) ( {die[2]} {die[3]} ) ;\n\n")
    f.writelines(f"ROW {r.name} {r.site} {r.x} {r.y} {r.orient} DO {r.num_x} BY 1 STEP {r.step_x} 0 ;\n" for r in rows)
    f.write(f"\nCOMPONENTS {len(components)} ;\n")
    f.writelines(f"- {n(c.name)} {c.master} + {'FIXED' if c.fixed else 'PLACED'} ( {c.x} {c.y} ) {c.orient} ;\n"
                 for c in components)
    f.write(f"END COMPONENTS\n\nPINS {len(pins)} ;\n")
    f.writelines(f"- {n(p.name)} + NET {n(p.net)} + DIRECTION {p.direction} + USE SIGNAL\n"
                 f"  + PORT + LAYER {p.layer} ( {-p.half} {-p.half} ) ( {p.half} {p.half} ) "
                 f"+ PLACED ( {p.x} {p.y} ) N ;\n" for p in pins)
    f.write(f"END PINS\n\nNETS {len(nets)} ;\n")
    for name, conns in nets:
        f.write(f"- {n(name)}" + "".join(f" ( {c if c == 'PIN' else n(c)} {n(p)} )" for c, p in conns) + " ;\n")
    f.write("END NETS\n\nEND DESIGN\n")


def read_def_components(path: Path) -> dict:
    """DIEAREA, ROWs and COMPONENTS of a DEF written by ``write_def`` (for checks and pictures)."""
    die, rows, comps, units = None, [], [], None
    section = None
    with open(path) as f:
        for line in f:
            t = line.split()
            if not t:
                continue
            if t[0] == "UNITS":
                units = int(t[3])
            elif t[0] == "DIEAREA":
                die = (int(t[2]), int(t[3]), int(t[6]), int(t[7]))
            elif t[0] == "ROW":
                rows.append({"name": t[1], "site": t[2], "x": int(t[3]), "y": int(t[4]), "orient": t[5],
                             "num_x": int(t[7]), "step_x": int(t[11])})
            elif t[0] in ("COMPONENTS", "PINS", "NETS"):
                section = t[0]
            elif t[0] == "END":
                section = None
            elif section == "COMPONENTS" and t[0] == "-":
                comps.append({"name": t[1], "master": t[2], "status": t[4], "x": int(t[6]), "y": int(t[7]),
                              "orient": t[9]})
    return {"dbu": units, "die": die, "rows": rows, "components": comps}
