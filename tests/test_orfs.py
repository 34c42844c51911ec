"""flow.orfs: the ORFS design generated for tests/data/mac_sram, the msh_sram wrappers against the
msh_sram simulation model, the runner's refusal without docker/FLOW_HOME, and the metrics parser."""
import json
import random
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from flow import orfs
from flow.macro_map import lef_size, macro_sizes, map_sram
from flow.orfs_metrics import MetricsError, collect_metrics
from flow.synth import synthesize
from flow.toolchain import tool_env
from pdk_config import find_pdk, pdk_from_env

DATA = Path(__file__).parent / "data"
REPO = Path(__file__).resolve().parents[1]
PDK = str(pdk_from_env())   # absolute; default set by tests/conftest.py
SEED = 20250117


@pytest.fixture(scope="module")
def design(tmp_path_factory):
    """mac_sram synthesised and turned into an ORFS design; its ROM table is written like nano_k3.luts does."""
    root = tmp_path_factory.mktemp("orfs")
    rtl = root / "rtl"
    shutil.copytree(DATA / "mac_sram", rtl)
    rng = random.Random(SEED)
    (rtl / "roms").mkdir()
    words = [rng.randrange(256) for _ in range(64)]
    (rtl / "roms" / "scale.hex").write_text("// scale table\n" + "\n".join(f"{w:02x}" for w in words) + "\n")
    synth = synthesize(rtl, root / "synth")
    desc = orfs.generate(root / "synth", rtl, root / "orfs")
    return {"root": root, "rtl": rtl, "synth": synth, "desc": desc, "words": words,
            "dir": Path(desc["design_dir"])}


def make_vars(design_dir: Path, names: list[str]) -> dict[str, str]:
    """config.mk as GNU make reads it (PLATFORM_DIR = the PDK, as ORFS's nangate45 platform folder)."""
    probe = design_dir.parent / "probe.mk"
    probe.write_text(f"include {design_dir / 'config.mk'}\nprint:\n" +
                     "".join(f"\t@echo '{n}=$({n})'\n" for n in names))
    out = subprocess.run(["make", "-s", "-f", str(probe), f"PLATFORM_DIR={PDK}", "print"],
                         capture_output=True, text=True, check=True).stdout
    return dict(line.split("=", 1) for line in out.splitlines())


def test_config_mk_names_existing_files(design):
    if shutil.which("make") is None:
        pytest.skip("GNU make is not installed")
    v = make_vars(design["dir"], ["DESIGN_NAME", "PLATFORM", "VERILOG_FILES", "SDC_FILE", "ADDITIONAL_LEFS",
                                  "ADDITIONAL_LIBS", "DIE_AREA", "CORE_AREA", "NK3_FAKERAM_DIR"])
    assert v["DESIGN_NAME"] == "mac_sram" and v["PLATFORM"] == "nangate45"
    assert v["NK3_FAKERAM_DIR"] == PDK
    files = v["VERILOG_FILES"].split() + [v["SDC_FILE"]] + v["ADDITIONAL_LEFS"].split() + v["ADDITIONAL_LIBS"].split()
    missing = [f for f in files if not Path(f).is_file()]
    assert not missing, missing
    assert [Path(f).name for f in v["ADDITIONAL_LEFS"].split()] == ["fakeram45_64x32.lef"]
    assert all(Path(f).is_relative_to(PDK) for f in v["ADDITIONAL_LEFS"].split() + v["ADDITIONAL_LIBS"].split())
    # the PDK is referred to, never copied
    assert not list(design["root"].joinpath("orfs").rglob("*.lef")) and not list(design["root"].rglob("*.lib"))


def test_every_storage_instance_is_mapped(design):
    desc, synth = design["desc"], design["synth"]
    insts = {(m["path"], m["type"], m["depth"], m["width"]) for m in synth["macros"]["instances"]}
    mapped = {(m["path"], m["type"], m["depth"], m["width"]) for m in desc["mappings"]}
    assert insts == mapped and len(insts) == 2
    srams = [m for m in desc["mappings"] if m["type"] == "msh_sram"]
    assert [(m["path"], m["macro"], m["count"]) for m in srams] == [("mac_sram.acc_sram", "fakeram45_64x32", 1)]
    text = (design["dir"] / "src" / "msh_macros.v").read_text()
    for m in srams:
        name = desc["wrappers"][f"{m['depth']}x{m['width']}"]
        assert re.search(rf"^module {name} \(", text, re.M)
        assert f"DEPTH == {m['depth']} && WIDTH == {m['width']}" in text
        assert len(re.findall(rf"^\s*{m['macro']} mem_r\d+_c\d+ \(", text, re.M)) == m["count"]
    # the ROM becomes a case statement holding the hex file's words
    assert desc["roms"][0]["module"] == "msh_rom_scale_64x8"
    body = text[text.index("module msh_rom_scale_64x8"):]
    table = [int(v, 16) for v in re.findall(r"6'd\d+: lookup = 8'h([0-9a-f]+);", body)]
    assert table == design["words"]


def test_sdc_clock_is_10ns_on_clk(design):
    sdc = (design["dir"] / "constraint.sdc").read_text()
    clocks = re.findall(r"^create_clock -name (\S+) -period (\S+) \[get_ports \{(\S+)\}\]", sdc, re.M)
    assert clocks == [("clk", "10.0", "clk")]
    assert re.search(r"^set_input_delay 2\.0 -clock clk", sdc, re.M)
    assert re.search(r"^set_output_delay 2\.0 -clock clk", sdc, re.M)


def test_die_holds_cells_and_macros(design):
    fp = json.loads((design["dir"] / "floorplan.json").read_text())
    lefs = {r.name: r for r in find_pdk().fakerams}
    w, h = lef_size(lefs["fakeram45_64x32"].lef)
    assert (w, h) == (20.14, 61.6)
    assert fp["macro_area_um2"] == pytest.approx(w * h, abs=1e-3)
    assert fp["std_cell_area_um2"] >= design["synth"]["area"]["logic_um2"]
    x0, y0, x1, y1 = fp["core"]
    core_area = (x1 - x0) * (y1 - y0)
    die_area = fp["die"][2] * fp["die"][3]
    assert die_area >= core_area >= fp["std_cell_area_um2"] / fp["std_utilization"] + fp["macro_area_um2"]
    assert core_area - fp["macro_area_with_halo_um2"] >= fp["std_cell_area_um2"] / fp["std_utilization"]
    boxes = fp["packing"]["boxes"]
    assert len(boxes) == 1
    for b in boxes:                       # every macro, halo included, inside the core
        assert b["w"] >= w + 2 * fp["macro_halo_um"] and b["h"] >= h + 2 * fp["macro_halo_um"]
        assert 0 <= b["x"] and b["x"] + b["w"] <= x1 - x0 + 1e-6
        assert 0 <= b["y"] and b["y"] + b["h"] <= y1 - y0 + 1e-6
    for v, grid in ((x0, 0.19), (x1, 0.19), (y0, 1.4), (y1, 1.4)):   # on the Nangate45 site grid
        assert abs(v / grid - round(v / grid)) < 1e-6, (v, grid)
    mk = (design["dir"] / "config.mk").read_text()
    assert f"export CORE_AREA = {x0} {y0} {x1} {y1}" in mk


def _verilator(args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(["verilator", *args], cwd=cwd, env=tool_env(), capture_output=True, text=True)


def fakeram_model(depth: int, width: int) -> str:
    """A fakeram45 as the LIB describes it (w_mask_in 1 = write the bit); rd_out is garbage after a
    write (the inverted word), so the test fails if the wrapper relied on rd_out holding."""
    aw = (depth - 1).bit_length()
    return f"""
module fakeram45_{depth}x{width} (input clk, input ce_in, input we_in, input [{aw - 1}:0] addr_in,
    input [{width - 1}:0] wd_in, input [{width - 1}:0] w_mask_in, output reg [{width - 1}:0] rd_out);
    reg [{width - 1}:0] mem [0:{depth - 1}];
    always @(posedge clk) if (ce_in) begin
        if (we_in) begin
            mem[addr_in] <= (wd_in & w_mask_in) | (mem[addr_in] & ~w_mask_in);
            rd_out <= ~mem[addr_in];
        end else rd_out <= mem[addr_in];
    end
endmodule
"""


def test_wrapper_parses_in_verilator_and_yosys(design, tmp_path):
    src = design["dir"] / "src"
    stubs = tmp_path / "fakeram.v"
    stubs.write_text(fakeram_model(64, 32))
    r = _verilator(["--lint-only", "-Wall", "-Wno-DECLFILENAME", "-Wno-UNUSEDSIGNAL", "--top-module", "mac_sram",
                    str(src / "mac_sram.v"), str(src / "msh_macros.v"), str(stubs)], tmp_path)
    assert r.returncode == 0, r.stderr
    # Yosys (what ORFS synthesises with) reads it with the fakeram45 liberty as the macro's only definition
    lib = design["desc"]["fakerams"]["fakeram45_64x32"]["lib"]
    script = (f"read_liberty -lib {lib}; read_verilog -defer -sv {src / 'mac_sram.v'} {src / 'msh_macros.v'}; "
              f"hierarchy -check -top mac_sram; synth -flatten -top mac_sram; "
              f"tee -o {tmp_path / 'stat.json'} stat -json")
    code = ("import sys; from pyosys import libyosys as ys; d = ys.Design()\n"
            f"for c in {script!r}.split('; '): ys.run_pass(c, d)\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    cells = json.loads((tmp_path / "stat.json").read_text())["modules"]["\\mac_sram"]["num_cells_by_type"]
    assert cells.get("fakeram45_64x32") == 1
    assert not any(t.startswith("$mem") for t in cells), cells


TB = """
module tb;
    reg clk = 0;
    integer cycle, errors = 0, reads = 0;
{decls}
    initial begin
        for (cycle = 0; cycle < {cycles}; cycle = cycle + 1) begin
{drive}
            #1 clk = 1; #1 clk = 0;
{check}
        end
        $display("DONE reads=%0d errors=%0d", reads, errors);
        $finish;
    end
endmodule
"""


def _sram_bench(shapes: list[tuple[int, int]], cycles: int) -> str:
    """The wrapper (dut_*) and the SPEC model (ref_*) side by side, random traffic that never reads and
    writes in one cycle (the documented limit), rdata compared after every edge."""
    decls, drive, check = [], [], []
    for i, (d, w) in enumerate(shapes):
        aw, nb = (d - 1).bit_length(), w // 8
        decls.append(f"""    reg we{i} = 0, re{i} = 0; reg [{aw - 1}:0] wa{i} = 0, ra{i} = 0; reg [{w - 1}:0] wd{i} = 0;
    reg [{nb - 1}:0] ws{i} = 0; wire [{w - 1}:0] dut{i}, ref{i}; reg valid{i} = 0;
    msh_sram #(.DEPTH({d}), .WIDTH({w})) dut_{i} (.clk(clk), .we(we{i}), .waddr(wa{i}), .wdata(wd{i}), .wstrb(ws{i}),
        .re(re{i}), .raddr(ra{i}), .rdata(dut{i}));
    ref_sram #(.DEPTH({d}), .WIDTH({w})) ref_{i} (.clk(clk), .we(we{i}), .waddr(wa{i}), .wdata(wd{i}), .wstrb(ws{i}),
        .re(re{i}), .raddr(ra{i}), .rdata(ref{i}));""")
        # first a full write of every word (contents start undefined), then random traffic
        drive.append(f"""            if (cycle < {d}) begin we{i} = 1; re{i} = 0; wa{i} = cycle; ws{i} = {{{nb}{{1'b1}}}};
            end else begin we{i} = ($urandom % 3) == 0; re{i} = !we{i} && ($urandom % 2); wa{i} = $urandom % {d};
                ws{i} = $urandom; end
            ra{i} = $urandom % {d}; wd{i} = {{($urandom), ($urandom)}};""")
        check.append(f"""            if (re{i}) begin valid{i} = 1; reads = reads + 1; end
            if (valid{i} && dut{i} !== ref{i}) begin
                if (errors < 5) $display("MISMATCH {d}x{w} cycle %0d: wrapper %h model %h", cycle, dut{i}, ref{i});
                errors = errors + 1; end""")
    return TB.format(decls="\n".join(decls), drive="\n".join(drive), check="\n".join(check), cycles=cycles)


def test_sram_wrappers_match_the_model(tmp_path):
    """Shapes that exercise one macro, width tiles with unused bits, and depth tiles with a read mux."""
    sizes = macro_sizes(find_pdk().fakerams)
    shapes = [(64, 32), (64, 40), (4096, 32), (40, 24)]
    maps = {s: map_sram(f"t{s[0]}x{s[1]}", *s, sizes) for s in shapes}
    print(f"seed {SEED}: " + ", ".join(f"{d}x{w}->{m.rows}x{m.cols} {m.macro.name}" for (d, w), m in maps.items()))
    assert any(m.rows > 1 for m in maps.values()) and any(m.cols > 1 for m in maps.values())
    model = (REPO / "verification" / "models" / "msh_sram.v").read_text().replace("module msh_sram", "module ref_sram")
    rams = sorted({(m.macro.depth, m.macro.width) for m in maps.values()})
    (tmp_path / "dut.v").write_text(orfs.sram_dispatch(shapes) + "".join(orfs.sram_wrapper(maps[s]) for s in shapes)
                                    + "".join(fakeram_model(*r) for r in rams))
    (tmp_path / "ref.v").write_text(model)
    (tmp_path / "tb.v").write_text(_sram_bench(shapes, 12000))
    r = _verilator(["--binary", "-Wno-fatal", "-Wno-WIDTH", "--top-module", "tb", "-j", "4", "-CFLAGS", "-fcoroutines",
                    "tb.v", "dut.v", "ref.v"], tmp_path)
    assert r.returncode == 0, r.stderr[-3000:]
    run = subprocess.run([str(tmp_path / "obj_dir" / "Vtb"), f"+verilator+seed+{SEED}"], capture_output=True,
                         text=True, cwd=tmp_path)
    out = run.stdout
    m = re.search(r"DONE reads=(\d+) errors=(\d+)", out)
    assert m, out[-2000:] + run.stderr[-2000:]
    assert int(m[2]) == 0, out[-2000:]
    assert int(m[1]) > 10000
    assert "read and write in one cycle" not in out


def test_collision_is_reported_in_simulation(tmp_path):
    m = map_sram("t", 64, 32, macro_sizes(find_pdk().fakerams))
    assert "read and write in one cycle" in orfs.sram_wrapper(m)
    assert "`ifndef SYNTHESIS" in orfs.sram_wrapper(m)


def test_run_without_docker_or_flow_home_says_what_to_install(design, monkeypatch, tmp_path, capsys):
    monkeypatch.delenv("FLOW_HOME", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))          # no docker, no podman
    root = design["root"]
    rc = orfs.main(["--synth", str(root / "synth"), "--rtl", str(design["rtl"]), "--out", str(tmp_path / "o"), "--run"])
    err = capsys.readouterr().err
    assert rc == 1
    assert "cannot run ORFS here" in err and "FLOW_HOME is not set" in err and "docker: not installed" in err
    assert "docker pull openroad/orfs" in err and "FLOW_HOME=<checkout>/flow" in err
    assert (tmp_path / "o" / "designs" / "nangate45" / "mac_sram" / "config.mk").is_file()   # generated anyway
    assert not (tmp_path / "o" / "orfs.json").exists()


@pytest.mark.skipif(shutil.which("docker") is None, reason="no docker client")
def test_docker_client_without_engine_is_refused(monkeypatch):
    monkeypatch.delenv("FLOW_HOME", raising=False)
    if orfs._engine_answers(shutil.which("docker"))[0]:
        pytest.skip("a docker engine answers here")
    with pytest.raises(orfs.OrfsError, match=r"docker at .*no engine answers"):
        orfs.pick_runner("docker")


def test_container_command_mounts_design_and_pdk(tmp_path):
    cmd = orfs.run_command("docker", "/usr/bin/docker", tmp_path, "mac_sram", orfs.DEFAULT_IMAGE, ["finish"])
    assert cmd[:3] == ["/usr/bin/docker", "run", "--rm"]
    assert f"{tmp_path.resolve()}:/nk3/orfs" in cmd and f"{Path(PDK).resolve()}:/nk3/pdk:ro" in cmd
    script = cmd[-1]
    assert "make -C /OpenROAD-flow-scripts/flow" in script
    assert "DESIGN_CONFIG=/nk3/orfs/designs/nangate45/mac_sram/config.mk" in script
    assert "WORK_HOME=/nk3/orfs" in script and "NK3_FAKERAM_DIR=/nk3/pdk" in script and script.endswith("finish")


# ---------------------------------------------------------------------------------------------- metrics

SAMPLE = DATA / "orfs_metrics_sample.json"


def _expected_summary(r):
    assert r["area"]["instance_um2"] == pytest.approx(4630.2)
    assert r["area"]["macros_um2"] == pytest.approx(1240.62)
    assert r["area"]["utilization"] == pytest.approx(0.4966)
    assert r["route"]["wirelength_um"] == 21873
    assert r["route"]["drc_errors"] == 0
    assert r["clock"]["fmax_hz"] == pytest.approx(2.6e8)
    assert r["timing"]["finish"] == {"setup_ws": 6.13, "setup_tns": 0.0, "hold_ws": 0.0821, "hold_tns": 0.0}
    assert r["timing"]["floorplan"]["setup_ws"] == pytest.approx(5.41)
    assert r["timing"]["floorplan"]["hold_ws"] is None        # floorplan reports no hold slack
    assert list(r["timing"]) == ["floorplan", "globalplace", "detailedplace", "cts", "globalroute", "finish"]
    assert "floorplan__timing__hold__ws" in r["missing"]
    assert "finish__design__die__area" not in r["missing"]


def test_metrics_from_metadata_json(tmp_path):
    rep = tmp_path / "reports" / "nangate45" / "mac_sram" / "base"
    rep.mkdir(parents=True)
    shutil.copy(SAMPLE, rep / "metadata.json")
    r = collect_metrics(tmp_path, "nangate45", "mac_sram")
    assert r["sources"] == [str(rep / "metadata.json")]
    _expected_summary(r)


def test_metrics_from_stage_logs(tmp_path):
    """The same numbers split into the per-stage files ORFS writes under logs/ (2_1_floorplan.json ...)."""
    files = {"floorplan": "2_1_floorplan.json", "globalplace": "3_3_place_gp.json", "detailedplace": "3_5_place_dp.json",
             "cts": "4_1_cts.json", "globalroute": "5_1_grt.json", "detailedroute": "5_2_route.json",
             "finish": "6_report.json"}
    metrics = json.loads(SAMPLE.read_text())
    logs = tmp_path / "logs" / "nangate45" / "mac_sram" / "base"
    logs.mkdir(parents=True)
    for stage, name in files.items():
        part = {k: v for k, v in metrics.items() if k.startswith(stage + "__")}
        (logs / name).write_text(json.dumps(part))
    r = collect_metrics(tmp_path, "nangate45", "mac_sram")
    assert len(r["sources"]) == len(files)
    _expected_summary(r)


def test_metrics_missing_run_is_an_error(tmp_path):
    with pytest.raises(MetricsError, match=r"no ORFS metrics.*metadata.json.*logs"):
        collect_metrics(tmp_path, "nangate45", "mac_sram")
