"""flow/parasitics.py: wires over block macros run above the macros' obstructions (metal5/metal6)."""

import pytest

from flow.lefdef import read_lef
from flow.parasitics import MacroShadow, NetPins, RcModel, net_rc, over_macro_layers
from pdk_config import find_pdk

def _layer(name: str, direction: str, width: float, rpersq: float) -> str:
    return (f"LAYER {name}\n  TYPE ROUTING ; DIRECTION {direction} ; WIDTH {width} ; RESISTANCE RPERSQ {rpersq} ; "
            f"CAPACITANCE CPERSQDIST 1e-4 ;\nEND {name}\n")


TECH = ("VERSION 5.8 ;\nUNITS\n  DATABASE MICRONS 2000 ;\nEND UNITS\n"
        + "".join(_layer(f"m{k + 1}", "HORIZONTAL" if k % 2 == 0 else "VERTICAL", w, r)
                  for k, (w, r) in enumerate([(0.1, 0.4), (0.1, 0.4), (0.1, 0.3), (0.2, 0.2), (0.2, 0.1), (0.4, 0.1)]))
        + "END LIBRARY\n")
MACRO = """MACRO ram
  CLASS BLOCK ;
  SIZE 100 BY 50 ;
  OBS
    LAYER m1 ;
    RECT 0 0 100 50 ;
    LAYER m3 ;
    RECT 0 0 100 50 ;
  END
END ram
END LIBRARY
"""


def test_over_macro_layers_are_the_first_above_every_obstruction(tmp_path):
    (tmp_path / "t.lef").write_text(TECH)
    lef = read_lef(tmp_path / "t.lef")
    rc = RcModel.from_lef(lef, "m3", "m4")
    assert over_macro_layers(lef) is None and rc.r_h_over == rc.r_h      # no macro: nothing changes
    (tmp_path / "m.lef").write_text(MACRO)
    read_lef(tmp_path / "m.lef", lef)
    assert lef.masters["ram"].obs_layers == {"m1", "m3"}
    rc = RcModel.from_lef(lef, "m3", "m4")
    assert rc.over_layers == ("m5", "m4")          # above m3: m4 is the first vertical, m5 the first horizontal
    assert rc.r_h_over == pytest.approx(0.1 / 0.2) and rc.r_v_over == pytest.approx(0.2 / 0.2)


def test_nangate45_fakeram_is_crossed_on_metal5_and_metal6():
    pdk = find_pdk()
    lef = read_lef(pdk.tech_lef)
    for ram in pdk.fakerams:
        read_lef(ram.lef, lef)
    rc = RcModel.from_lef(lef)
    assert rc.over_layers == ("metal5", "metal6")
    assert rc.r_h_over == pytest.approx(0.21 / 0.14) and rc.r_h == pytest.approx(0.25 / 0.07)


def test_shadow_measures_the_route_over_macros():
    shadow = MacroShadow([(100.0, 0.0, 300.0, 50.0), (400.0, 0.0, 450.0, 500.0)])
    assert shadow.over(0.0, 20.0, 500.0, 20.0) == (250.0, 0.0)          # straight across both
    assert shadow.over(0.0, 60.0, 380.0, 60.0) == (0.0, 0.0)            # above the first, short of the second
    # from (0, 20) to (420, 400): horizontal first crosses 200 + 20 um, then climbs 480 um inside the
    # second macro's column from 20 to 400 (380 um); vertical first climbs at x = 0, then runs at y = 400
    # over the second macro's 20 um: the mean of the two
    h, v = shadow.over(0.0, 20.0, 420.0, 400.0)
    assert h == pytest.approx((220.0 + 20.0) / 2) and v == pytest.approx((380.0 + 0.0) / 2)
    assert shadow.over(0.0, 20.0, 420.0, 400.0, shadow.near(0.0, 20.0, 420.0, 400.0)) == (h, v)
    assert not shadow.near(600.0, 600.0, 650.0, 650.0) and shadow.near(0.0, 0.0, 150.0, 10.0)


def test_branch_over_a_macro_takes_the_upper_layer_resistance():
    rc = RcModel("m3", "m4", 3.6, 1.5, 0.05, 0.06, ("m5", "m6"), 1.5, 1.5)
    net = NetPins("n", ["a:Z", "b:A", "c:A"], [False] * 3, [True, False, False], [0.0, 1000.0, 0.0],
                  [10.0, 10.0, 200.0])
    length, cap, res = net_rc(net, rc)
    length2, cap2, res2 = net_rc(net, rc, MacroShadow([(200.0, 0.0, 800.0, 100.0)]))
    assert (length2, cap2) == (length, cap)                      # the capacitance stays the mid layers'
    assert res[1] == pytest.approx(3600.0) and res2[1] == pytest.approx(400 * 3.6 + 600 * 1.5)
    assert res2[2] == pytest.approx(res[2]) == pytest.approx(190 * 1.5)      # beside the macro: unchanged
