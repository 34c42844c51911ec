"""flow.synth on small designs of tests/data: a MAC with macros, a design with an inferred memory."""
import json
import re
from pathlib import Path

import pytest

from flow.synth import SynthError, liberty_areas, read_filelist, synthesize

DATA = Path(__file__).parent / "data"


@pytest.fixture(scope="module")
def mac(tmp_path_factory):
    out = tmp_path_factory.mktemp("synth") / "synth"
    return out, synthesize(DATA / "mac_sram", out)


def test_netlist_uses_nangate45_cells(mac):
    out, r = mac
    netlist = (out / "mac_sram.v").read_text()
    areas = liberty_areas(Path(r["pdk"]["liberty"]))
    used = set(re.findall(r"^\s*(\w+) _\d+_ \(", netlist, re.M))
    assert used and used <= set(areas), used - set(areas)
    assert "DFF_X1" in used
    assert "msh_sram #(" in netlist and "msh_rom #(" in netlist      # macros stay black-box instances
    assert not (out.parent / "synth.tmp").exists()


def test_unchanged_inputs_reuse_the_result(mac, tmp_path):
    out, r = mac
    log = out / "yosys.log"
    stamp = log.stat().st_mtime_ns
    again = synthesize(DATA / "mac_sram", out)
    assert again == r and log.stat().st_mtime_ns == stamp       # not synthesized a second time
    rtl = tmp_path / "rtl"                                        # a changed source is synthesized again
    rtl.mkdir()
    for f in (DATA / "mac_sram").iterdir():
        (rtl / f.name).write_bytes(f.read_bytes())
    v = next(rtl.glob("*.v"))
    v.write_text(v.read_text() + "\n// edited\n")
    assert synthesize(rtl, tmp_path / "synth")["inputs_sha256"] != r["inputs_sha256"]


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
