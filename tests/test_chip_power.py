"""flow.macro_power's reading of a fakeram45 liberty and its price of one msh_sram's tiles, and flow.chip_power's
engine of an instance path. (The whole chip's power runs in tests/test_ci_chip.py.)"""
from __future__ import annotations

from types import SimpleNamespace

import pytest

from flow.chip_power import engine_of, engines_of
from flow.macro_power import MacroPowerError, read_fakeram_lib, sram_power

LIB = """library(fakeram45_8x16) {
    time_unit : "1ns";
    voltage_unit : "1V";
    current_unit : "1uA";
    leakage_power_unit : "1nw";
    default_cell_leakage_power : 0;
  cell(fakeram45_8x16) {
    pin(clk) {
        internal_power(){
            rise_power(scalar) { values ("100.0") }
            fall_power(scalar) { values ("60.0") }
        }
    }
    bus(addr_in) {
        internal_power(){ when : "(! (we_in) )";
            rise_power(scalar) { values ("2.0"); } fall_power(scalar) { values ("2.0"); } }
        internal_power(){ when : "(we_in)";
            rise_power(scalar) { values ("3.0"); } fall_power(scalar) { values ("3.0"); } }
    }
    pin(we_in) { internal_power(){ rise_power(scalar) { values ("1.0"); } fall_power(scalar) { values ("1.0"); } } }
    bus(wd_in) { internal_power(){ rise_power(scalar) { values ("4.0"); } fall_power(scalar) { values ("4.0"); } } }
    bus(w_mask_in) { internal_power(){ rise_power(scalar) { values ("0.5"); } fall_power(scalar) { values ("0.5"); } } }
    cell_leakage_power : 2000.0;
  }
}
"""


def test_a_fakeram_liberty_gives_leakage_clock_and_pin_energies(tmp_path):
    lib = tmp_path / "fakeram45_8x16.lib"
    lib.write_text(LIB)
    ram = read_fakeram_lib(lib)
    assert ram.leakage_w == pytest.approx(2e-6)             # 2000 nW, not the default 0 above it
    assert ram.clock_j == pytest.approx(160e-15)            # rise + fall, fJ
    assert ram.pin_j["addr_in"] == pytest.approx(3e-15)     # the larger of its when cases
    assert ram.pin_j["wd_in"] == pytest.approx(4e-15) and ram.pin_j["w_mask_in"] == pytest.approx(0.5e-15)

    mapping = SimpleNamespace(path="top.ram", rows=2, cols=3)
    got = sram_power(mapping, ram, {"raddr": 50, "waddr": 30, "we": 10, "re": 10, "wdata": 200, "wstrb": 5},
                     cycles=100, freq_hz=1e8)
    assert got["tiles"] == 6 and got["leakage_W"] == pytest.approx(6 * 2e-6)
    assert got["clock_W"] == pytest.approx(6 * 160e-15 * 1e8)
    per_cycle = (100 / 100 * 3e-15 * 6) + (200 / 100 * 4e-15 * 2) + (5 * 8 / 100 * 0.5e-15 * 2)
    assert got["pins_W"] == pytest.approx(per_cycle * 1e8)


def test_a_liberty_in_other_units_is_refused(tmp_path):
    lib = tmp_path / "fakeram45_8x16.lib"
    lib.write_text(LIB.replace('current_unit : "1uA"', 'current_unit : "1mA"'))
    with pytest.raises(MacroPowerError, match="current_unit is '1mA'"):
        read_fakeram_lib(lib)


def test_an_instance_belongs_to_the_deepest_engine_its_path_starts_with():
    rows = [{"name": n, "area_um2": 1.0} for n in ("core.mac", "core.mac.store", "(core own logic)", "core.kda")]
    engines, rest = engines_of({"hierarchy": {"engines": rows}})
    assert engines[0] == "core/mac/store" and rest == "(core own logic)"
    assert engine_of("core/mac/store/_1_", engines, rest) == "core/mac/store"
    assert engine_of("core/mac/_2_", engines, rest) == "core/mac"
    assert engine_of("core/mac_input/_3_", engines, rest) == rest        # a prefix of the name is not its engine
    assert engine_of("core/_4_", engines, rest) == rest and engine_of("_5_", engines, rest) == rest
