"""flow.synth on small designs of tests/data: a MAC with macros, a design with an inferred memory."""
import json
import re
import shutil
from pathlib import Path

import pytest

from flow.synth import Part, SynthError, liberty_areas, partition, read_filelist, synthesize

DATA = Path(__file__).parent / "data"


@pytest.fixture(scope="module")
def mac(tmp_path_factory):
    out = tmp_path_factory.mktemp("synth") / "synth"
    return out, synthesize(DATA / "mac_sram", out, jobs=2)


def test_netlist_uses_nangate45_cells(mac):
    out, r = mac
    netlist = (out / "mac_sram.v").read_text()
    areas = liberty_areas(Path(r["pdk"]["liberty"]))
    used = set(re.findall(r"^\s*(\w+) _\d+_ \(", netlist, re.M))
    assert used and used <= set(areas), used - set(areas)
    assert "DFF_X1" in used
    assert "msh_sram #(" in netlist and "msh_rom #(" in netlist      # macros stay black-box instances
    assert not (out.parent / "synth.tmp").exists()


def test_netlists_declare_no_signed_wires(mac):
    """mac_sram's product register is `reg signed`; OpenSTA's Verilog reader rejects `wire signed`."""
    out, r = mac
    for key in ("netlist", "sta_netlist"):
        text = (out / r["files"][key]).read_text()
        assert "prod" in text and " signed " not in text


def test_unchanged_inputs_reuse_the_result(mac, tmp_path):
    out, r = mac
    log = out / "yosys.log"
    stamp = log.stat().st_mtime_ns
    again = synthesize(DATA / "mac_sram", out, jobs=2)
    assert again == r and log.stat().st_mtime_ns == stamp       # not synthesized a second time
    rtl = tmp_path / "rtl"                                        # a changed source is synthesized again
    rtl.mkdir()
    for f in (DATA / "mac_sram").iterdir():
        (rtl / f.name).write_bytes(f.read_bytes())
    v = next(rtl.glob("*.v"))
    v.write_text(v.read_text() + "\n// edited\n")
    assert synthesize(rtl, tmp_path / "synth")["inputs_sha256"] != r["inputs_sha256"]


def test_a_config_change_alone_keeps_the_netlist_and_names_the_new_config(tmp_path):
    """config.json may change where the Verilog does not (a parameter recorded for later steps): the netlist
    is reused, and synth.json then names the new config, so later steps do not take it for stale."""
    rtl = tmp_path / "rtl"
    shutil.copytree(DATA / "mac_sram", rtl)
    first = synthesize(rtl, tmp_path / "synth")
    stamp = (tmp_path / "synth" / "yosys.log").stat().st_mtime_ns
    cfg = json.loads((rtl / "config.json").read_text())
    (rtl / "config.json").write_text(json.dumps(cfg | {"recorded_only": 1}))
    again = synthesize(rtl, tmp_path / "synth")
    assert (tmp_path / "synth" / "yosys.log").stat().st_mtime_ns == stamp
    assert again["inputs_sha256"] == first["inputs_sha256"]
    assert again["rtl"]["config_sha256"] != first["rtl"]["config_sha256"]
    assert json.loads((tmp_path / "synth" / "synth.json").read_text())["rtl"]["config_sha256"] == \
        again["rtl"]["config_sha256"]


def test_area_cells_and_macro_bits(mac):
    out, r = mac
    assert json.loads((out / "synth.json").read_text()) == json.loads(json.dumps(r))
    assert r["area"]["logic_um2"] > 500
    assert r["area"]["yosys_chip_area_um2"] == pytest.approx(r["area"]["logic_um2"], abs=0.01)
    assert r["cells"]["count"] == sum(r["cells"]["by_type"].values()) > 100
    macros = {m["path"]: m for m in r["macros"]["instances"]}
    assert macros["mac_sram.acc_sram"]["bits"] == 64 * 32
    assert macros["mac_sram.scale_rom"]["bits"] == 64 * 8
    assert r["macros"]["bits"] == 2560
    assert r["area"]["macro_um2"] == pytest.approx(2560 / 2**20 * 1e6, abs=1e-3)
    assert r["area"]["total_um2"] == pytest.approx(r["area"]["logic_um2"] + r["area"]["macro_um2"], abs=1e-2)
    assert r["area"]["within_budget"]


def test_hierarchy_breakdown(mac):
    _, r = mac
    engines = {e["name"]: e for e in r["hierarchy"]["engines"]}
    assert set(engines) == {"lane0", "lane1", "(top-level logic)"}
    assert engines["lane0"]["area_um2"] == engines["lane1"]["area_um2"] > 0
    assert sum(e["area_um2"] for e in engines.values()) == pytest.approx(r["area"]["logic_um2"], abs=0.01)
    assert r["hierarchy"]["modules"]["mac_lane"]["instances"] == 2


def test_inferred_memory_is_rejected(tmp_path):
    with pytest.raises(SynthError, match=r"inferred memory.*bad_mem\.scratch_buf \(16 x 8 bits"):
        synthesize(DATA / "bad_mem", tmp_path / "synth")
    assert not (tmp_path / "synth").exists()


def test_missing_pdk_fails_at_once(tmp_path, monkeypatch):
    monkeypatch.setenv("NANGATE45_PDK", "/nonexistent")
    with pytest.raises(SynthError) as e:
        synthesize(DATA / "mac_sram", tmp_path / "synth")
    msg = str(e.value)
    assert "NANGATE45_PDK=/nonexistent" in msg and "NangateOpenCellLibrary_typical.lib" in msg
    assert not any(tmp_path.iterdir())


def test_missing_config_names_the_step(tmp_path):
    with pytest.raises(SynthError, match="config.json not found.*rtl_gen"):
        synthesize(tmp_path, tmp_path / "synth")


def test_missing_clock_names_the_field(tmp_path):
    """ABC's delay target is the RTL's clock: a config.json without params.clock_ns stops synthesis, naming it."""
    shutil.copytree(DATA / "mac_sram", tmp_path / "rtl")
    cfg = json.loads((tmp_path / "rtl" / "config.json").read_text())
    del cfg["params"]["clock_ns"]
    (tmp_path / "rtl" / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(SynthError, match=r"config.json has no positive params.clock_ns.*got None"):
        synthesize(tmp_path / "rtl", tmp_path / "synth")


def test_filelist_rejects_unknown_options(tmp_path):
    (tmp_path / "a.v").write_text("module a; endmodule\n")
    (tmp_path / "x.f").write_text("// comment\n+incdir+.\na.v\n-y lib\n")
    with pytest.raises(SynthError, match=r"x.f:4: option '-y lib'"):
        read_filelist(tmp_path / "x.f")


def test_full_adders_option_maps_adders_to_fa_cells(mac, tmp_path):
    _, r = mac
    fa = synthesize(DATA / "mac_sram", tmp_path / "synth", full_adders=True)
    assert fa["options"]["full_adders"] is True and r["options"]["full_adders"] is False
    netlist = (tmp_path / "synth" / "mac_sram.v").read_text()
    assert re.search(r"^\s*(FA_X1|HA_X1) ", netlist, re.M)
    assert fa["inputs_sha256"] != r["inputs_sha256"]


def _generic_names(netlist: str) -> list[str]:
    """The netlist's lines, sorted, with Yosys' generated names (``_123_``) and its banner made neutral."""
    return sorted(re.sub(r"_\d+_", "_N_", ln) for ln in netlist.splitlines()
                  if ln.strip() and not ln.startswith("/* Generated by"))


def test_parallel_parts_give_the_same_netlist(mac, tmp_path):
    out, r = mac
    assert [(p["top"], p["black_boxes"]) for p in r["parts"]] == [("mac_lane", []), ("mac_sram", ["mac_lane"])]
    one = synthesize(DATA / "mac_sram", tmp_path / "synth", jobs=1)
    assert [p["top"] for p in one["parts"]] == ["mac_sram"]
    assert one["inputs_sha256"] == r["inputs_sha256"]         # --jobs does not change the result
    for key in ("area", "cells", "macros"):
        assert one[key] == r[key], key
    assert one["hierarchy"] == r["hierarchy"]
    for name in ("mac_sram.v", "mac_sram.sta.v"):
        assert _generic_names((tmp_path / "synth" / name).read_text()) == _generic_names((out / name).read_text())


def _plan(**mods):
    return {m: {"weight": w, "subs": sorted(set(subs)), "instances": len(subs)} for m, (w, subs) in mods.items()}


def test_partition_splits_the_big_engines_below_the_wrapper():
    plan = _plan(top=(1, ["core"]), core=(10, ["big", "mid", "small"]), big=(50, ["lut"]), lut=(30, []),
                 mid=(30, []), small=(5, []))
    parts = partition(plan, "top", 2)               # 1/(4*2) of 126 = 15.75: big (80) and mid (30) split
    assert parts == [Part("big", (), 80), Part("mid", (), 30), Part("top", ("big", "mid"), 16)]
    assert partition(plan, "top", 1) == [Part("top", (), 126)]
    assert [p.top for p in partition(plan, "top", 4)] == ["big", "mid", "top"]     # small: 5 < 126/16
    assert [p.top for p in partition(plan, "top", 8)] == ["big", "mid", "top", "small"]     # 5 >= 126/32


def test_partition_keeps_a_shared_subtree_in_the_rest():
    plan = _plan(top=(1, ["a", "b", "c"]), a=(40, ["lut"]), b=(40, []), c=(5, ["lut"]), lut=(20, []))
    # lut is used by a and by c: a stays with the rest, so no module is mapped by two processes
    assert partition(plan, "top", 2) == [Part("top", ("b",), 66), Part("b", (), 40)]


def test_jobs_must_be_a_positive_count(tmp_path):
    for bad in (0, -1, 1.5, True):
        with pytest.raises(SynthError, match=f"--jobs must be .* at least 1; got {re.escape(repr(bad))}"):
            synthesize(DATA / "mac_sram", tmp_path / "synth", jobs=bad)


def test_rtlil_netlist_is_the_sta_netlist(mac):
    out, r = mac
    sta_text, macros = ((out / r["files"][k]).read_text() for k in ("sta_netlist", "macro_modules"))
    assert sta_text.endswith(macros) and "module msh_sram_64x32 (" in macros    # the STA netlist ends with them
    sta = sta_text[:-len(macros)]
    il = (out / r["files"]["sta_rtlil"]).read_text()
    modules = lambda pat, text: sorted(re.findall(pat, text, re.M))        # noqa: E731
    assert modules(r"^module \\?(\S+?)\s*\(", sta) == modules(r"^module \\(\S+)$", il) == ["mac_lane", "mac_sram"]
    cells_v = sorted(re.findall(r"^\s*(\w+) \\?(\S+) \($", sta, re.M))
    cells_il = sorted(re.findall(r"^\s*cell \\(\S+) \\(\S+)$", il, re.M))
    assert len(cells_v) > 100 and cells_v == cells_il       # same instances (macros renamed by size in both)
    assert ("msh_sram_64x32", "acc_sram") in cells_il
