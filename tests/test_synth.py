"""flow.synth on small designs of tests/data: a MAC with macros, a design with an inferred memory."""
import json
import re
import shutil
from pathlib import Path

import pytest

from flow.synth import Part, SynthError, liberty_areas, partition, read_filelist, runner, synthesize
from flow.synth.driver import part_cache_dir
from flow.synth.partition import whole
from flow.synth.sources import part_source, read_source

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


def test_jobs_change_nothing_but_the_order(mac, tmp_path):
    """One Yosys process maps the same parts one after the other: the same digests, the same netlists."""
    out, r = mac
    assert [(p["top"], p["black_boxes"]) for p in r["parts"]] == [("mac_lane", []), ("mac_sram", ["mac_lane"])]
    one = synthesize(DATA / "mac_sram", tmp_path / "synth", jobs=1)
    assert [(p["top"], p["digest"], p["reused"]) for p in one["parts"]] == \
        [(p["top"], p["digest"], False) for p in r["parts"]]
    assert one["inputs_sha256"] == r["inputs_sha256"]         # --jobs does not change the result
    for key in ("area", "cells", "macros", "hierarchy"):
        assert one[key] == r[key], key
    for name in ("mac_sram.v", "mac_sram.sta.v", "mac_sram.sta.il"):
        assert (tmp_path / "synth" / name).read_text() == (out / name).read_text(), name


def test_flatten_is_one_part(mac, tmp_path):
    out, r = mac
    flat = synthesize(DATA / "mac_sram", tmp_path / "synth", flatten=True)
    assert [(p["top"], p["black_boxes"]) for p in flat["parts"]] == [("mac_sram", [])]
    assert list(flat["hierarchy"]["modules"]) == ["mac_sram"] and flat["macros"] == r["macros"]


def _plan(**mods):
    return {m: {"weight": w, "subs": sorted(set(subs)), "instances": len(subs)} for m, (w, subs) in mods.items()}


def test_partition_makes_each_engine_below_the_wrapper_a_part():
    plan = _plan(top=(1, ["core"]), core=(10, ["big", "mid", "small"]), big=(50, ["lut"]), lut=(30, []),
                 mid=(30, []), small=(5, []))
    assert partition(plan, "top") == [Part("big", (), 80), Part("mid", (), 30), Part("top", ("big", "mid", "small"), 11),
                                      Part("small", (), 5)]
    assert whole(plan, "top") == [Part("top", (), 126)]


def test_partition_keeps_a_shared_subtree_in_the_rest():
    plan = _plan(top=(1, ["a", "b", "c"]), a=(40, ["lut"]), b=(40, []), c=(5, ["lut"]), lut=(20, []))
    # lut is used by a and by c: a stays with the rest, so no module is mapped by two processes
    assert partition(plan, "top") == [Part("top", ("b",), 66), Part("b", (), 40)]


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


# ---------------------------------------------------------------------------------------------- part cache

def _copy_design(name: str, dest: Path, edit: tuple[str, str] | None = None) -> Path:
    """tests/data/<name> copied to ``dest``, with ``edit`` (old, new) applied once to its Verilog."""
    shutil.copytree(DATA / name, dest)
    if edit:
        v = dest / f"{name}.v"
        text = v.read_text()
        assert text.count(edit[0]) == 1, edit
        v.write_text(text.replace(*edit))
    return dest


def _yosys_runs(monkeypatch) -> list[str]:
    """Records the Yosys children a synthesis starts (the plan and each part run)."""
    runs: list[str] = []
    real = runner._child

    def child(mode, job, folder):
        runs.append(f"{mode}:{job['top']}" if mode == "worker" else mode)
        return real(mode, job, folder)
    monkeypatch.setattr(runner, "_child", child)
    return runs


PARTS = ("rs_mul", "rs_acc", "rs_ctl", "regions_small", "rs_front")
NETLISTS = ("regions_small.v", "regions_small.sta.v", "regions_small.sta.il", "regions_small.macros.v")


@pytest.fixture(scope="module")
def regions(tmp_path_factory):
    """regions_small in five parts (rs_mul, rs_acc, rs_ctl, the rest with the engines as black boxes, rs_front), its
    cache beside it."""
    base = tmp_path_factory.mktemp("regions")
    return base / "synth", synthesize(DATA / "regions_small", base / "synth", jobs=2)


def test_a_second_synthesis_reuses_every_part(regions, tmp_path, monkeypatch, capsys):
    out, first = regions
    assert [(p["top"], p["reused"]) for p in first["parts"]] == [(t, False) for t in PARTS]
    cache = part_cache_dir(out, first["part_cache"])
    assert first["part_cache"] == "../synth_cache" and cache == out.resolve().with_name("synth_cache")   # beside, by default
    assert all(p["reads"] == "own modules" and (cache / p["digest"] / "meta.json").is_file() for p in first["parts"])
    runs = _yosys_runs(monkeypatch)
    again = synthesize(DATA / "regions_small", tmp_path / "synth", jobs=2,
                       part_cache=part_cache_dir(out, first["part_cache"]))
    assert runs == []                                        # no Yosys at all: the plan is cached too
    err = capsys.readouterr().err
    for k, p in enumerate(first["parts"], 1):
        assert f"part {k} of 5: {p['top']} reused (cache {p['digest'][:8]})" in err
    assert [(p["digest"], p["reused"], p["runtime_s"]) for p in again["parts"]] == \
        [(p["digest"], True, 0.0) for p in first["parts"]]
    for key in ("area", "cells", "macros", "hierarchy"):
        assert again[key] == first[key], key
    for name in NETLISTS:
        assert (tmp_path / "synth" / name).read_text() == (out / name).read_text(), name


def test_an_edited_module_maps_only_its_part_and_equals_a_cold_synthesis(regions, tmp_path, monkeypatch):
    """rs_mul's logic changes (not its ports): its part runs again; the rest, which holds rs_mul as a black box,
    is reused. The merged result is the one a synthesis of the edited design without any cache gives."""
    first_out, first = regions
    rtl = _copy_design("regions_small", tmp_path / "rtl", ("prod <= {p, p ^ {a, b}};", "prod <= {p, p ^ {b, a}};"))
    runs = _yosys_runs(monkeypatch)
    warm = synthesize(rtl, tmp_path / "warm" / "synth", jobs=2,
                      part_cache=part_cache_dir(first_out, first["part_cache"]))
    assert runs == ["plan", "worker:rs_mul"]
    assert [(p["top"], p["reused"]) for p in warm["parts"]] == [(t, t != "rs_mul") for t in PARTS]
    assert warm["parts"][0]["digest"] != first["parts"][0]["digest"]
    cold = synthesize(rtl, tmp_path / "cold" / "synth", jobs=2)
    assert cold["part_cache"] != warm["part_cache"] and not any(p["reused"] for p in cold["parts"])
    assert [p["digest"] for p in cold["parts"]] == [p["digest"] for p in warm["parts"]]
    for key in ("area", "cells", "macros", "hierarchy"):
        assert warm[key] == cold[key], key
    assert (tmp_path / "warm" / "synth" / NETLISTS[0]).read_text() != (first_out / NETLISTS[0]).read_text()
    for name in NETLISTS:
        assert (tmp_path / "warm" / "synth" / name).read_text() == (tmp_path / "cold" / "synth" / name).read_text()


def test_a_damaged_cache_entry_is_not_used(regions, tmp_path, monkeypatch):
    """A changed file (same size), an entry without meta.json (a copy cut short) and the temporary folder of
    an interrupted run: the two damaged parts are mapped again, the leftover folder removed."""
    out, first = regions
    cache = tmp_path / "cache"
    shutil.copytree(part_cache_dir(out, first["part_cache"]), cache)
    mul, acc = (cache / p["digest"] for p in first["parts"][:2])
    net = mul / "netlist.v"
    net.write_bytes(net.read_bytes().replace(b"DFF_X1", b"DFF_X2", 1))
    (acc / "meta.json").unlink()
    (cache / ".tmp-0123456789abcdef-999999999").mkdir()          # no such process
    runs = _yosys_runs(monkeypatch)
    again = synthesize(DATA / "regions_small", tmp_path / "synth", jobs=2, part_cache=cache)
    assert runs == ["worker:rs_mul", "worker:rs_acc"]
    assert [p["reused"] for p in again["parts"]] == [False, False, True, True, True]
    assert not (cache / ".tmp-0123456789abcdef-999999999").exists()
    assert (acc / "meta.json").is_file() and b"DFF_X2" not in net.read_bytes()
    for name in NETLISTS:
        assert (tmp_path / "synth" / name).read_text() == (out / name).read_text(), name


def test_a_part_reads_its_modules_and_its_black_boxes_ports():
    source = read_source([DATA / "regions_small" / "regions_small.v"], [])
    rest = part_source(source, Part("regions_small", ("rs_mul", "rs_acc"), 1),
                       {"regions_small": {"subs": ["rs_core"]}, "rs_core": {"subs": ["rs_acc", "rs_ctl", "rs_front",
                                                                                     "rs_mul"]}})
    assert re.findall(r"^module (\w+)", rest, re.M) == ["rs_front", "rs_ctl", "rs_core", "regions_small", "rs_mul",
                                                      "rs_acc"]
    stubs = rest[rest.index("module rs_mul"):]
    assert "output reg  [31:0] prod" in stubs and "always" not in stubs and "msh_sram" not in stubs
    # the plan reaching a module the text does not name (a derived $paramod): the part reads every file
    assert part_source(source, Part("regions_small", (), 1), {"regions_small": {"subs": ["$paramod\\x"]}}) is None


def test_a_source_with_directives_is_read_whole(tmp_path):
    """A preprocessor directive may reach across modules: such a source is not split, every part reads all
    files, and the result is the split one's."""
    rtl = _copy_design("mac_sram", tmp_path / "rtl")
    (rtl / "mac_sram.v").write_text("`timescale 1ns / 1ps\n" + (rtl / "mac_sram.v").read_text())
    assert "`timescale" in read_source([rtl / "mac_sram.v"], []).why
    whole = synthesize(rtl, tmp_path / "synth", jobs=2)
    split = synthesize(DATA / "mac_sram", tmp_path / "split" / "synth", jobs=2)
    assert [p["reads"] for p in whole["parts"]] == ["all files", "all files"]
    assert [p["reads"] for p in split["parts"]] == ["own modules", "own modules"]
    assert whole["cells"]["count"] == split["cells"]["count"]
    assert whole["macros"] == split["macros"]


def test_booth_maps_only_multipliers_with_both_operands_wide():
    """BOOTH_STEPS turn a 16 x 16 product into Booth partial products and leave a 4 x 16 one (an INT4 weight
    times an activation, where Booth maps larger) a $mul for the array mapping."""
    from pyosys import libyosys as ys
    from flow.synth.worker import BOOTH_MIN_BITS, BOOTH_STEPS
    d = ys.Design()
    path = Path(__file__).parent / "data" / "booth_pair.v"
    for cmd in [f"read_verilog -sv {path}", "hierarchy -top booth_pair", "proc", *BOOTH_STEPS]:
        ys.run_pass(cmd, d)
    muls = [c for c in d.top_module().cells_.values() if c.type.str() == "$mul"]
    widths = sorted((c.getParam(ys.IdString("\\A_WIDTH")).as_int(), c.getParam(ys.IdString("\\B_WIDTH")).as_int())
                    for c in muls)
    assert len(widths) == 1 and min(widths[0]) < BOOTH_MIN_BITS, widths
