"""flow/touchup.py: the sign-off touch-up reads OpenSTA's transition report, finds each violating net's driver
in a live OpenSTA session and up-sizes it by the overshoot."""
import pytest

from flow import touchup
from flow.resize import size_ladders
from flow.sta_session import StaSession
from flow.synth import liberty_areas
from pdk_config import find_pdk

SLEW_REPORT = """\
max_transition

Pin                                    Limit   Trans   Slack
------------------------------------------------------------
y                                       0.05    0.12   -0.07 (VIOLATED)
u2/Z                                    0.05    0.10   -0.05 (VIOLATED)
"""

# r1 -> n2 -> u2 (a BUF_X1 on a 60 fF output) -> y; the slew report above is this design's at a 0.05 ns limit
NETLIST = """\
module top(input a, input clk, output y);
  wire n1, n2;
  INV_X1 u1 (.A(a), .ZN(n1));
  DFF_X1 r1 (.D(n1), .CK(clk), .Q(n2));
  BUF_X1 u2 (.A(n2), .Z(y));
endmodule
"""


def test_parse_slew_gives_each_violating_pin_its_ratio_over_the_limit():
    assert touchup.parse_slew(SLEW_REPORT) == {"y": pytest.approx(2.4), "u2/Z": pytest.approx(2.0)}


def test_overshoots_take_the_worst_ratio_over_corners_and_capacitance(tmp_path):
    (tmp_path / "slow.slew").write_text(SLEW_REPORT)
    (tmp_path / "fast.slew").write_text(SLEW_REPORT.replace("0.10   -0.05", "0.15   -0.10"))
    caps = [{"driver": "u1/ZN", "load_ff": 30.0, "limit_ff": 20.0}, {"driver": "port", "load_ff": 9.0, "limit_ff": 3.0}]
    over = touchup.overshoots([tmp_path / "slow.slew", tmp_path / "fast.slew", tmp_path / "missing.slew"], caps)
    assert over == {"y": pytest.approx(2.4), "u2/Z": pytest.approx(3.0), "u1/ZN": pytest.approx(1.5)}


def test_stronger_covers_the_overshoot_with_margin_or_takes_the_largest():
    ladders = {"BUF": [1, 2, 4, 8, 16, 32], "NAND2": [1, 2, 4]}
    assert touchup.stronger("BUF_X1", 1.5, ladders) == "BUF_X2"          # 1.5 x 1.15 = 1.7 -> X2
    assert touchup.stronger("BUF_X2", 2.0, ladders) == "BUF_X8"          # 2 x 2 x 1.15 = 4.6 -> X8
    assert touchup.stronger("NAND2_X1", 9.0, ladders) == "NAND2_X4"      # past the ladder: its largest
    assert touchup.stronger("NAND2_X4", 1.2, ladders) is None
    assert touchup.stronger("fakeram45_64x32", 2.0, ladders) is None


def test_touch_up_finds_the_driver_in_opensta_and_up_sizes_it(tmp_path):
    pdk = find_pdk()
    lib = pdk.plain_liberty("slow", tmp_path)
    (tmp_path / "top.v").write_text(NETLIST)
    with StaSession(tmp_path / "session.log") as sta:
        sta.run(f"read_liberty {{{lib}}}\nread_verilog {{{tmp_path / 'top.v'}}}\nlink_design top\n"
                "create_clock -name clk -period 10 [get_ports clk]\nset_load 60 [get_ports y]")
        over = touchup.parse_slew(SLEW_REPORT)
        assert touchup.drivers(sta, sorted(over)) == {"y": ("u2", "BUF_X1"), "u2/Z": ("u2", "BUF_X1")}
        done = touchup.touch_up(sta, size_ladders(list(liberty_areas(lib))), over, 10.0)
        assert done.drivers_upsized == 1 and not done.unsizable
        assert done.sizing.original["u2"] == "BUF_X1" and done.sizing.replaced["u2"] == "BUF_X4"  # 2.4 x 1.15
        assert sta.run("puts [get_property [get_cells u2] ref_name]").strip().endswith("BUF_X4")
        assert done.unmendable_pins == []
        port_driven = touchup.touch_up(sta, size_ladders(list(liberty_areas(lib))), {"u1/A": 1.5}, 10.0)
        assert port_driven.drivers_upsized == 0 and port_driven.unmendable_pins == ["u1/A"]   # the input port a
