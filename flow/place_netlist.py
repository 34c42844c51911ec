"""The synthesised netlist as placement objects (flow/place.py, flow/regions.py).

``flatten`` reads ``<top>.sta.il`` (the RTLIL twin of the STA netlist ``<top>.sta.v``) with the macros'
empty modules ``<top>.macros.v`` as leaf cells and flattens the hierarchy (flow/rtlil_flat.py); names stay
those OpenSTA sees in ``<top>.sta.v`` (``lane0/_0644_``). ``build_design`` turns the flat module into a
``Design``: standard cells, the fakeram45 tiles of every ``msh_sram`` (flow/macro_map.py), the I/O pins and
the nets between them.
"""
from __future__ import annotations

import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

from flow.lefdef import Lef
from flow.macro_map import Mapping, map_instance
from flow.rtlil_flat import RtlilError, flatten_rtlil
from flow.repair import write_verilog

REPO = Path(__file__).resolve().parent.parent
MACRO_PIN = re.compile(r"^(msh_sram|msh_rom)_(\d+)x(\d+)$")


class PlaceError(RuntimeError):
    """Placement could not run; the message says what is missing or wrong."""


PROGRESS_TAG = {"stage": "place"}      # the stage that prints: flow.signoff sets "signoff" (it uses these steps too)


def progress(msg: str) -> None:
    print(f"[{PROGRESS_TAG['stage']}] {msg}", file=sys.stderr, flush=True)


# ---------------------------------------------------------------------------------------------- netlist

def lef_directions(lef: Lef, ctype: str) -> dict[str, str] | None:
    """Signal pin -> direction (``input``, ``output``) of the LEF master ``ctype``; None if no LEF defines it."""
    master = lef.masters.get(ctype)
    if master is None:
        return None
    return {p.name: p.direction.lower() for p in master.pins.values() if p.use not in ("POWER", "GROUND")}


def flatten(netlist: Path, macros: Path, top: str, lef: Lef) -> dict:
    """The STA netlist, flat, as one module of Yosys' JSON (flow/rtlil_flat.py); cell pin directions from the LEF."""
    def directions(ctype: str) -> dict[str, str]:
        found = lef_directions(lef, ctype)
        if found is None:
            raise PlaceError(f"{netlist} instantiates {ctype}, which no LEF defines (nor {macros.name})")
        return found

    try:
        return flatten_rtlil(netlist, macros.read_text(), top, directions)
    except RtlilError as e:
        raise PlaceError(f"cannot flatten {netlist}: {e}") from None


def inst_path(name: str, attrs: dict) -> str:
    """The instance / net path OpenSTA uses: hierarchy levels joined by '/'."""
    hdl = attrs.get("hdlname")
    return "/".join(hdl.split(" ")) if hdl else name


def _bit_names(module: dict) -> dict[int, str]:
    """Net name per bit: the name at the highest hierarchy level (then a visible, then the shortest one)."""
    best: dict[int, tuple] = {}
    for name, nn in module["netnames"].items():
        path = inst_path(name, nn.get("attributes", {}))
        bits, offset, upto = nn["bits"], nn.get("offset", 0), nn.get("upto", 0)
        for i, b in enumerate(bits):
            if not isinstance(b, int):
                continue
            idx = offset + (len(bits) - 1 - i if upto else i)
            full = path if len(bits) == 1 and offset == 0 else f"{path}[{idx}]"
            key = (path.count("/"), nn.get("hide_name", 0), len(full), full)
            if b not in best or key < best[b]:
                best[b] = key
    return {b: k[-1] for b, k in best.items()}


def port_bit_name(pname: str, width: int, j: int) -> str:
    return pname if width == 1 else f"{pname}[{j}]"


def net_names(module: dict) -> dict[int, str]:
    """A unique name per bit, as the flat netlist (flow/repair.py ``write_verilog``) declares it: a port
    bit is named after the port (inputs first), every other bit as ``_bit_names`` chooses."""
    names: dict[int, str] = {}
    for pname, p in sorted(module["ports"].items(), key=lambda kv: kv[1]["direction"] != "input"):
        for j, b in enumerate(p["bits"]):
            if isinstance(b, int):
                names.setdefault(b, port_bit_name(pname, len(p["bits"]), j))
    used = set(names.values())
    for b, name in _bit_names(module).items():
        if b not in names:
            while name in used:
                name = f"{name}_{b}"
            names[b] = name
            used.add(name)
    return names


def write_placed_netlist(path: Path, module: dict, top: str, macro_modules: str) -> None:
    """``module`` as a flat Verilog netlist at ``path``, with the instance and net names the DEF and SPEF use,
    and the empty macro modules after it."""
    with open(path, "w") as f:
        write_verilog(f, module, top, net_names(module), lambda key, c: inst_path(key, c.get("attributes", {})),
                      macro_modules)


@dataclass
class Design:
    """The flat netlist as placement objects. Components: standard cells (movable) then macro tiles
    (fixed); I/O pins separately. Each net pin: (object, pin name for DEF, offset x/y dbu, SPEF node or
    None when OpenSTA does not see it as a leaf pin, drives the net)."""
    top: str
    comp_name: list[str] = field(default_factory=list)
    comp_key: list[str] = field(default_factory=list)      # the cell's key in the flat Yosys module
    comp_master: list[str] = field(default_factory=list)
    comp_w: list[int] = field(default_factory=list)
    comp_h: list[int] = field(default_factory=list)
    comp_group: list[str] = field(default_factory=list)    # what the placement picture colours cells by
    group_kind: str = "top-level instance"                  # ... and its legend's title
    n_std: int = 0
    io_name: list[str] = field(default_factory=list)
    io_dir: list[str] = field(default_factory=list)
    net_name: list[str] = field(default_factory=list)
    net_pins: list[list[tuple]] = field(default_factory=list)
    mappings: list[Mapping] = field(default_factory=list)
    roms: list[str] = field(default_factory=list)
    flop_srams: list[str] = field(default_factory=list)
    # (cell key, msh_sram pin, bit) -> its net pin (tile component, fakeram pin, x, y offset dbu, ...): the
    # tile that holds the bit, for what needs a macro pin's position (flow/repair.py)
    macro_pins: dict = field(default_factory=dict)

    # Arrays derived from net_pins and comp_master (flow/place_flat.py PinTable, flow/design_rules.py sink
    # capacitances), kept until one of them changes: who edits those in place updates these
    # (flow/electrical.py resize_in_place).
    def derived(self) -> dict:
        return self.__dict__.setdefault("_derived", {})

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        state.pop("_derived", None)
        return state


def _sram_pin(pin: str, j: int, m: Mapping) -> tuple[int, int, str]:
    """(tile row, tile column, fakeram pin) standing for bit ``j`` of msh_sram pin ``pin`` in wire estimates."""
    w, abits = m.macro.width, max(1, (m.macro.depth - 1).bit_length())
    table_ = {
        "clk": (0, 0, "clk"), "we": (0, 0, "we_in"), "re": (0, 0, "ce_in"),
        "waddr": (0, 0, f"addr_in[{j}]" if j < abits else "ce_in"),
        "raddr": (0, 0, f"addr_in[{j}]" if j < abits else "ce_in"),
        "wdata": (0, j // w, f"wd_in[{j % w}]"),
        "rdata": (0, j // w, f"rd_out[{j % w}]"),
        "wstrb": (0, (8 * j) // w, f"w_mask_in[{(8 * j) % w}]"),
    }
    if pin not in table_:
        raise PlaceError(f"msh_sram pin {pin!r} is not in SPEC section 5's port list")
    return table_[pin]


def build_design(module: dict, top: str, lef: Lef, sizes) -> Design:
    dbu = lef.dbu
    to_dbu = lambda um: int(round(um * dbu))       # noqa: E731
    d = Design(top)
    pins_of_bit: dict[int, list[tuple]] = {}
    offsets: dict[tuple[str, str], tuple[int, int]] = {}     # (cell, pin) -> the pin's offset in dbu

    def attach(bit, entry):
        if isinstance(bit, int):
            pins_of_bit.setdefault(bit, []).append(entry)

    macros = []
    for name, cell in module["cells"].items():
        ctype = cell["type"]
        if ctype == "$scopeinfo":
            continue
        path = inst_path(name, cell.get("attributes", {}))
        hdl = cell.get("attributes", {}).get("hdlname", "").split(" ")
        group = hdl[0] if len(hdl) > 1 else "(top)"
        if MACRO_PIN.match(ctype):
            macros.append((name, path, ctype, cell, group))
            continue
        master = lef.masters.get(ctype)
        if master is None:
            raise PlaceError(f"cell {path} is a {ctype}, which no LEF defines")
        i = len(d.comp_name)
        d.comp_name.append(path)
        d.comp_key.append(name)
        d.comp_master.append(ctype)
        d.comp_w.append(to_dbu(master.width_um))
        d.comp_h.append(to_dbu(master.height_um))
        d.comp_group.append(group)
        for pin, bits in cell["connections"].items():
            off = offsets.get((ctype, pin))
            if off is None:
                lp = master.pins.get(pin)
                if lp is None:
                    raise PlaceError(f"{ctype} has no pin {pin} in the LEF (instance {path})")
                off = offsets[ctype, pin] = (to_dbu(lp.center_um[0]), to_dbu(lp.center_um[1]))
            drv = cell["port_directions"].get(pin) == "output"
            attach(bits[0], (i, pin, off[0], off[1], f"{path}:{pin}", drv))
    d.n_std = len(d.comp_name)
    for name, path, ctype, cell, group in macros:
        kind, depth, width = MACRO_PIN.match(ctype).groups()
        m = map_instance(path, kind, int(depth), int(width), sizes)
        d.mappings.append(m)
        if m.macro is None:
            (d.flop_srams if m.impl == "flops" else d.roms).append(path)
            continue
        master = lef.masters[m.macro.name]
        first = len(d.comp_name)
        for r in range(m.rows):
            for c in range(m.cols):
                d.comp_name.append(f"{path}/ram_{r}_{c}")
                d.comp_key.append(name)
                d.comp_master.append(m.macro.name)
                d.comp_w.append(to_dbu(master.width_um))
                d.comp_h.append(to_dbu(master.height_um))
                d.comp_group.append(group)
        abits = max(1, (m.macro.depth - 1).bit_length())
        for pin, bits in cell["connections"].items():
            drv = cell["port_directions"].get(pin) == "output"
            for j, b in enumerate(bits):
                r, c, lpin = _sram_pin(pin, j, m)
                x, y = master.pins[lpin].center_um
                if pin in ("we", "re") or (pin in ("waddr", "raddr") and j < abits):
                    at = first + (m.rows // 2) * m.cols + m.cols // 2      # reaches every tile: the middle one
                elif pin in ("wdata", "wstrb"):
                    at = first + (m.rows // 2) * m.cols + c                 # its column's tiles: the middle row
                else:
                    at = first + r * m.cols + c
                entry = (at, lpin, to_dbu(x), to_dbu(y), None, drv)
                d.macro_pins[(name, pin, j)] = entry
                attach(b, entry)
    for pname, port in module["ports"].items():
        bits = port["bits"]
        for j, b in enumerate(bits):
            name = port_bit_name(pname, len(bits), j)
            k = len(d.io_name)
            d.io_name.append(name)
            d.io_dir.append(port["direction"])
            attach(b, (-1 - k, "PIN", 0, 0, name, port["direction"] == "input"))
    names = net_names(module)
    for b, pins in sorted(pins_of_bit.items()):
        if len(pins) >= 2:
            d.net_name.append(names.get(b, f"_net{b}_"))
            d.net_pins.append(pins)
    return d
