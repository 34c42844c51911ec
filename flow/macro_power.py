"""Power of the fakeram45 macros an ``msh_sram`` becomes at placement (flow.macro_map), from their liberty data and
the accesses a run made.

A fakeram45 liberty gives, per macro: ``cell_leakage_power``; the clock pin's ``internal_power`` (a rise and a
fall energy, with no ``when``: it is spent on every clock edge, accessed or not); and an ``internal_power``
energy per transition of each input pin (address, write enable, chip enable, data, mask; the largest of its
``when`` cases is taken). OpenSTA cannot price them here: the netlist it reads holds the ``msh_sram`` wrapper as a
black box, not the tiles. So, per instance mapped to a grid of ``rows`` x ``cols`` tiles (all clocked every cycle):

    leakage    = tiles x cell_leakage_power
    clock      = tiles x (E_rise + E_fall) x f
    pins       = sum over the wrapper's input bits of (transitions per cycle x E_pin x tiles reached) x f

where the wrapper's address and enable bits reach every tile, and a data or strobe bit the ``rows`` tiles of its
column (a strobe bit is 8 mask pins). The transitions are those the gate-level run counted on the part's pins
into the ``msh_sram``; the read and write addresses share the tiles' one address pin, so their transitions are
added (an upper bound on the shared pin's). An ``msh_sram`` mapped to flip-flops and an ``msh_rom`` (logic) have
no macro: they are listed as not priced here.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from flow.cell_models import CellModelError, parse_liberty

ENERGY_J = 1e-15        # liberty energy unit: voltage_unit (1V) x current_unit (1uA) x time_unit (1ns)
ADDRESS_PINS = ("raddr", "waddr", "re", "we")        # msh_sram inputs that reach every tile
MASK_PER_STROBE = 8                                  # a wstrb bit drives the mask pins of its byte
_UNITS = {"voltage_unit": ("1V",), "current_unit": ("1uA",), "time_unit": ("1ns",), "leakage_power_unit": ("1nw",
                                                                                                          "1nW")}


class MacroPowerError(RuntimeError):
    """A fakeram45 liberty is missing or does not read as expected; the message names the file and the field."""


@dataclass
class RamPower:
    """One fakeram45 macro's liberty figures."""
    name: str
    leakage_w: float
    clock_j: float                       # rise + fall energy of the clock pin: one cycle
    pin_j: dict[str, float]              # input pin -> energy per transition


def read_fakeram_lib(path: Path) -> RamPower:
    try:
        lib = parse_liberty(Path(path).read_text())
    except CellModelError as e:
        raise MacroPowerError(f"{path}: {e}") from None
    for unit, allowed in _UNITS.items():
        if lib.attrs.get(unit) not in allowed:
            raise MacroPowerError(f"{path}: {unit} is {lib.attrs.get(unit)!r}, expected one of {allowed} (the "
                                  "energy and leakage units this reader assumes)")
    cells = lib.sub("cell")
    if len(cells) != 1 or "cell_leakage_power" not in cells[0].attrs:
        raise MacroPowerError(f"{path}: expected one cell with a cell_leakage_power, found {len(cells)} cells")
    pins = {}
    for g in cells[0].groups:
        if g.kind in ("pin", "bus"):
            energies = [float(t.attrs["values"]) for ip in g.sub("internal_power") for t in ip.groups
                        if t.kind in ("rise_power", "fall_power") and "values" in t.attrs]
            if energies:
                pins[g.args[0]] = energies
    if "clk" not in pins or len(pins["clk"]) != 2:
        raise MacroPowerError(f"{path}: the clock pin clk has {pins.get('clk')} internal energies, expected a rise "
                              "and a fall value")
    clk = pins.pop("clk")
    return RamPower(Path(path).stem, float(cells[0].attrs["cell_leakage_power"]) * 1e-9, sum(clk) * ENERGY_J,
                    {p: max(e) * ENERGY_J for p, e in pins.items()})


def pin_energy(ram: RamPower) -> tuple[float, float, float]:
    """(address/enable, data, mask) energy per transition of one tile's pin."""
    def get(*names: str) -> float:
        found = [ram.pin_j[n] for n in names if n in ram.pin_j]
        if not found:
            raise MacroPowerError(f"{ram.name}: none of the pins {names} has an internal_power (has {sorted(ram.pin_j)})")
        return max(found)
    return get("addr_in", "we_in", "ce_in"), get("wd_in"), get("w_mask_in")


def sram_power(mapping, ram: RamPower, toggles: dict[str, int], cycles: int, freq_hz: float) -> dict:
    """One ``msh_sram`` instance mapped to ``mapping.rows`` x ``mapping.cols`` tiles of ``ram``, with its input
    pins' transitions over ``cycles`` (``toggles``: msh_sram pin -> transitions of all its bits)."""
    tiles = mapping.rows * mapping.cols
    e_addr, e_data, e_mask = pin_energy(ram)
    per_cycle = sum(toggles.get(p, 0) for p in ADDRESS_PINS) / cycles * e_addr * tiles
    per_cycle += toggles.get("wdata", 0) / cycles * e_data * mapping.rows
    per_cycle += toggles.get("wstrb", 0) * MASK_PER_STROBE / cycles * e_mask * mapping.rows
    return {"path": mapping.path, "macro": ram.name, "tiles": tiles, "leakage_W": tiles * ram.leakage_w,
            "clock_W": tiles * ram.clock_j * freq_hz, "pins_W": per_cycle * freq_hz}
