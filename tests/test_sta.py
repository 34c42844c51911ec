"""flow.sta on the synthesised test design: three corners, sane slack and period figures."""
from pathlib import Path

import pytest

import flow.sta as sta_mod
from flow.cli import job_count
from flow.sta import StaError, memory_jobs, parse_paths, run_sta
from flow.synth import synthesize

DATA = Path(__file__).parent / "data"


@pytest.fixture(scope="module")
def sta(tmp_path_factory):
    base = tmp_path_factory.mktemp("sta")
    synthesize(DATA / "mac_sram", base / "synth")
    return base, run_sta(base / "synth", base / "sta", ["slow", "typical", "fast"])   # the RTL's clock


def test_three_corners_with_sensible_numbers(sta):
    base, r = sta
    assert set(r["corners"]) == {"slow", "typical", "fast"}
    assert r["period_ns"] == 10.0           # params.clock_ns of tests/data/mac_sram/config.json
    assert (base / "sta" / "sta.json").is_file() and (base / "sta" / "sta.txt").is_file()
    for corner, c in r["corners"].items():
        # an 8x8 multiply and a 24-bit add take well under a 10 ns cycle but more than 0.5 ns in 45 nm
        assert 0.5 < c["min_period_ns"] < 10.0, (corner, c)
        assert c["met"] and c["tns_ns"] == 0.0
        assert c["min_period_ns"] == pytest.approx(10.0 - c["wns_ns"], abs=1e-3)
        assert 1 <= len(c["paths"]) <= 10
        assert c["paths"][0]["slack_ns"] == pytest.approx(c["wns_ns"], abs=1e-3)
        assert all(p["start"] and p["end"] and p["arrival_ns"] > 0 for p in c["paths"])
    # slower library, later arrival
    assert r["corners"]["slow"]["min_period_ns"] > r["corners"]["typical"]["min_period_ns"] \
        > r["corners"]["fast"]["min_period_ns"]


def test_tight_clock_violates(sta):
    base, r = sta
    tight = run_sta(base / "synth", base / "sta_tight", ["slow"], 2.0)["corners"]["slow"]
    assert tight["wns_ns"] < 0 and tight["tns_ns"] < 0 and not tight["met"]
    assert tight["min_period_ns"] == pytest.approx(2.0 - tight["wns_ns"], abs=1e-3)


def test_one_process_at_a_time_gives_the_same_slacks(sta):
    """One process at a time (one delay-calculation thread each: more crashed Debian's OpenSTA): the slacks
    stay the same."""
    base, r = sta
    one = run_sta(base / "synth", base / "sta_one", ["slow", "typical", "fast"], 10.0, jobs=1)
    assert {c: v["wns_ns"] for c, v in one["corners"].items()} == {c: v["wns_ns"] for c, v in r["corners"].items()}
    assert "set_thread_count" not in (base / "sta_one" / "slow.tcl").read_text()
    for bad in (0, 2.5, True):
        with pytest.raises(StaError, match=f"--jobs must be .* at least 1; got {bad!r}"):
            run_sta(base / "synth", base / "sta_bad", ["slow"], 10.0, jobs=bad)


def test_missing_synth_says_run_synth(tmp_path):
    with pytest.raises(StaError, match="run `make synth`"):
        run_sta(tmp_path / "nothing", tmp_path / "sta", ["typical"], 10.0)


def test_parse_paths_reads_a_full_report():
    text = """Startpoint: a[3] (input port clocked by clk)
Endpoint: lane0/_1224_ (rising edge-triggered flip-flop clocked by clk)
Path Group: clk
   2.9290   data arrival time
   9.9590   data required time
   7.0300   slack (MET)

Startpoint: x (input port clocked by clk)
Endpoint: y (output port clocked by clk)
   12.5000   data arrival time
   8.0000   data required time
   -4.5000   slack (VIOLATED)
"""
    p = parse_paths(text)
    assert [(x["start"], x["end"], x["slack_ns"], x["met"]) for x in p] == \
        [("a[3]", "lane0/_1224_", 7.03, True), ("x", "y", -4.5, False)]
    assert p[0]["arrival_ns"] == 2.929


def test_sta_processes_are_as_many_as_the_memory_holds(tmp_path, monkeypatch):
    """One OpenSTA per corner for a small design, whatever the CPUs; one when each would need more than the
    memory available (the nano sign-off's two 4.4 GB processes beside its own 13 GB filled the machine)."""
    netlist = tmp_path / "top.v"
    netlist.write_text("module top; endmodule\n" * 100)
    assert memory_jobs(netlist, None, 3) == 3
    assert memory_jobs(netlist, None, 2 * job_count(None, "OpenSTA processes")) > job_count(None, "CPUs")
    monkeypatch.setattr(sta_mod, "STA_BYTES_PER_INPUT_BYTE", 1e12)     # a terabyte per byte of input
    assert memory_jobs(netlist, netlist, 3) == 1
