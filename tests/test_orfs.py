"""flow.orfs and flow.orfs_storage: the ORFS design generated for tests/data/mac_sram and for a storage
design written here (a ROM larger than ORFS's default memory limit, an msh_sram cheaper as flip-flops),
the msh_sram wrappers and flip-flop arrays against the msh_sram simulation model, ORFS's own Yosys steps
up to its memory check, the runner's refusal without docker/FLOW_HOME, and the metrics parser."""
import dataclasses
import json
import random
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from flow import orfs, orfs_storage
from flow.macro_map import lef_size, map_sram, storage_lib
from flow.orfs_metrics import MetricsError, collect_metrics
from flow.place import build_design, flatten
from flow.place_out import read_lefs
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
    assert shutil.which("make"), "GNU make is not installed (apt-get install -y make); `make test` itself needs it"
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
    integer cycle, errors = 0, reads = 0, collisions = 0;
{decls}
    initial begin
        for (cycle = 0; cycle < {cycles}; cycle = cycle + 1) begin
{drive}
            #1 clk = 1; #1 clk = 0;
{check}
        end
        $display("DONE reads=%0d collisions=%0d errors=%0d", reads, collisions, errors);
        $finish;
    end
endmodule
"""


def _random_bits(n: int) -> str:
    """A Verilog expression of n random bits (one $urandom per 32)."""
    return "{" + ", ".join(["$urandom"] * -(-n // 32)) + "}"


def _sram_bench(shapes: list[tuple[int, int]], cycles: int, collide: bool = False) -> str:
    """The DUT (dut_*) and the SPEC model (ref_*) side by side, rdata compared after every edge. Random traffic:
    with ``collide`` reads and writes in any cycle, a third of the reads at the address written in that
    cycle; without, never a read and a write in one cycle (the macro wrappers' documented limit)."""
    decls, drive, check = [], [], []
    for i, (d, w) in enumerate(shapes):
        aw, nb = (d - 1).bit_length(), w // 8
        decls.append(f"""    reg we{i} = 0, re{i} = 0; reg [{aw - 1}:0] wa{i} = 0, ra{i} = 0; reg [{w - 1}:0] wd{i} = 0;
    reg [{nb - 1}:0] ws{i} = 0; wire [{w - 1}:0] dut{i}, ref{i}; reg valid{i} = 0;
    msh_sram #(.DEPTH({d}), .WIDTH({w})) dut_{i} (.clk(clk), .we(we{i}), .waddr(wa{i}), .wdata(wd{i}), .wstrb(ws{i}),
        .re(re{i}), .raddr(ra{i}), .rdata(dut{i}));
    ref_sram #(.DEPTH({d}), .WIDTH({w})) ref_{i} (.clk(clk), .we(we{i}), .waddr(wa{i}), .wdata(wd{i}), .wstrb(ws{i}),
        .re(re{i}), .raddr(ra{i}), .rdata(ref{i}));""")
        enables = (f"we{i} = $urandom % 2; re{i} = $urandom % 2;" if collide
                   else f"we{i} = ($urandom % 3) == 0; re{i} = !we{i} && ($urandom % 2);")
        raddr = f"($urandom % 3 == 0) ? wa{i} : $urandom % {d}" if collide else f"$urandom % {d}"
        # first a full write of every word (contents start undefined), then random traffic
        drive.append(f"""            if (cycle < {d}) begin we{i} = 1; re{i} = 0; wa{i} = cycle; ws{i} = {{{nb}{{1'b1}}}};
            end else begin {enables} wa{i} = $urandom % {d}; ws{i} = {_random_bits(nb)}; end
            ra{i} = {raddr}; wd{i} = {_random_bits(w)};""")
        check.append(f"""            if (re{i}) begin valid{i} = 1; reads = reads + 1; end
            if (re{i} && we{i} && ra{i} == wa{i}) collisions = collisions + 1;
            if (valid{i} && dut{i} !== ref{i}) begin
                if (errors < 5) $display("MISMATCH {d}x{w} cycle %0d: dut %h model %h", cycle, dut{i}, ref{i});
                errors = errors + 1; end""")
    return TB.format(decls="\n".join(decls), drive="\n".join(drive), check="\n".join(check), cycles=cycles)


def _run_bench(tmp_path: Path, dut: str, bench: str) -> tuple[int, int, int, str]:
    """(reads, collisions, errors, output) of the bench against verification/models/msh_sram.v."""
    model = (REPO / "verification" / "models" / "msh_sram.v").read_text().replace("module msh_sram", "module ref_sram")
    (tmp_path / "dut.v").write_text(dut)
    (tmp_path / "ref.v").write_text(model)
    (tmp_path / "tb.v").write_text(bench)
    r = _verilator(["--binary", "-Wno-fatal", "-Wno-WIDTH", "--top-module", "tb", "-j", "2", "-CFLAGS", "-fcoroutines",
                    "tb.v", "dut.v", "ref.v"], tmp_path)
    assert r.returncode == 0, r.stderr[-3000:]
    run = subprocess.run([str(tmp_path / "obj_dir" / "Vtb"), f"+verilator+seed+{SEED}"], capture_output=True,
                         text=True, cwd=tmp_path)
    m = re.search(r"DONE reads=(\d+) collisions=(\d+) errors=(\d+)", run.stdout)
    assert m, run.stdout[-2000:] + run.stderr[-2000:]
    return int(m[1]), int(m[2]), int(m[3]), run.stdout


@pytest.fixture(scope="module")
def lib():
    return storage_lib(find_pdk(), REPO / "build" / "pdk_cache")


def test_sram_wrappers_match_the_model(tmp_path, lib):
    """Shapes that exercise one macro, width tiles with unused bits, and depth tiles with a read mux."""
    shapes = [(64, 32), (64, 40), (4096, 32), (40, 24)]
    maps = {s: map_sram(f"t{s[0]}x{s[1]}", *s, lib) for s in shapes}
    print(f"seed {SEED}: " + ", ".join(f"{d}x{w}->{m.rows}x{m.cols} {m.macro.name}" for (d, w), m in maps.items()))
    assert all(m.impl == "macros" for m in maps.values())
    assert any(m.rows > 1 for m in maps.values()) and any(m.cols > 1 for m in maps.values())
    rams = sorted({(m.macro.depth, m.macro.width) for m in maps.values()})
    dut = (orfs_storage.sram_dispatch(shapes) + "".join(orfs_storage.sram_wrapper(maps[s]) for s in shapes)
           + "".join(fakeram_model(*r) for r in rams))
    reads, collisions, errors, out = _run_bench(tmp_path, dut, _sram_bench(shapes, 12000))
    assert errors == 0, out[-2000:]
    assert reads > 10000 and collisions == 0
    assert "read and write in one cycle" not in out


def test_collision_is_reported_in_simulation(tmp_path, lib):
    m = map_sram("t", 64, 32, lib)
    assert "read and write in one cycle" in orfs_storage.sram_wrapper(m)
    assert "`ifndef SYNTHESIS" in orfs_storage.sram_wrapper(m)


# (depth, width) of flip-flop arrays: the 2 x 512, the last flip-flop depths at 32, 24 and 8 bits
FLOP_SHAPES = [(2, 512), (3, 32), (4, 24), (10, 8)]


def test_flop_srams_match_the_model(tmp_path, lib):
    """The flip-flop arrays against verification/models/msh_sram.v cycle by cycle: reads and writes in any
    cycle, a third of the reads at the address written in that cycle (old word), random byte strobes,
    rdata held while re is low."""
    maps = {s: map_sram(f"t{s[0]}x{s[1]}", *s, lib) for s in FLOP_SHAPES}
    assert all(m.impl == "flops" for m in maps.values()), {s: m.impl for s, m in maps.items()}
    dut = orfs_storage.sram_dispatch(FLOP_SHAPES) + "".join(orfs_storage.sram_flops(maps[s]) for s in FLOP_SHAPES)
    reads, collisions, errors, out = _run_bench(tmp_path, dut, _sram_bench(FLOP_SHAPES, 6000, collide=True))
    print(f"seed {SEED}: {reads} reads, {collisions} at the address written in the same cycle, {errors} mismatches")
    assert errors == 0, out[-2000:]
    assert reads > 10000 and collisions > 1000


YOSYS_AREA = """\
import json, sys
from pyosys import libyosys as ys
liberty, src, top, out = sys.argv[1:]
d = ys.Design()
for c in [f"read_verilog -defer -sv {src}", f"hierarchy -check -top {top}", "synth -flatten",
          f"dfflibmap -liberty {liberty}", "opt", f"abc -D 10000 -liberty {liberty}", "opt_clean",
          f"tee -q -o {out} stat -json -liberty {liberty}"]:
    ys.run_pass(c, d)
"""


def _yosys_area(tmp_path: Path, verilog: str, top: str) -> float:
    """Cell area (um2) of ``top`` after Yosys + ABC on the typical Nangate45 liberty."""
    liberty = find_pdk().plain_liberty("typical", REPO / "build" / "pdk_cache")
    (tmp_path / f"{top}.v").write_text(verilog)
    r = subprocess.run([sys.executable, "-c", YOSYS_AREA, str(liberty), str(tmp_path / f"{top}.v"), top,
                        str(tmp_path / f"{top}.json")], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    stat = json.loads((tmp_path / f"{top}.json").read_text())
    return float(stat["modules"][f"\\{top}"]["area"])


@pytest.mark.parametrize("depth,width", [(3, 32), (4, 32), (2, 512)], ids=["3x32", "4x32", "2x512"])
def test_flop_area_estimate_matches_yosys(tmp_path, lib, depth, width):
    """The threshold's flip-flop area against what Yosys + ABC make of sram_flops, on both sides of the
    threshold at 32 bits: within 2 %, and Yosys's own area makes the same choice."""
    m = map_sram("t", depth, width, lib)
    flops = orfs_storage.sram_flops(dataclasses.replace(m, impl="flops"))
    area = _yosys_area(tmp_path, flops, orfs_storage.sram_module_name(depth, width))
    print(f"{depth}x{width}: estimate {m.flop_um2:.1f} um2, Yosys {area:.1f} um2, macro option {m.macro_option_um2:.1f}")
    assert area == pytest.approx(m.flop_um2, rel=0.02)
    assert (area < m.macro_option_um2) == (m.impl == "flops")


# A design with one of each storage kind the issue met: a ROM table of 513 words (Yosys makes it 1024 x 24
# bits, over ORFS's default SYNTH_MEMORY_MAX_BITS of 4096), an msh_sram cheaper as flip-flops (2 x 512) and
# one that stays a macro (4 x 32 on a fakeram45_32x32).
STORAGE_V = """\
module storage_mix (
    input  wire         clk,
    input  wire         we,
    input  wire         re,
    input  wire [9:0]   a,
    input  wire [511:0] d,
    input  wire [63:0]  s,
    output wire [23:0]  t1,
    output wire [23:0]  t2,
    output wire [511:0] q,
    output wire [31:0]  r
);
    msh_rom #(.DEPTH(513), .WIDTH(24), .INIT_FILE("rtl/roms/big.hex")) big_rom (
        .raddr1(a), .rdata1(t1), .raddr2(~a), .rdata2(t2));
    msh_sram #(.DEPTH(2), .WIDTH(512)) wide_sram (.clk(clk), .we(we), .waddr(a[0]), .wdata(d), .wstrb(s),
        .re(re), .raddr(a[1]), .rdata(q));
    msh_sram #(.DEPTH(4), .WIDTH(32)) small_sram (.clk(clk), .we(we), .waddr(a[1:0]), .wdata(d[31:0]),
        .wstrb(s[3:0]), .re(re), .raddr(a[3:2]), .rdata(r));
endmodule
"""


@pytest.fixture(scope="module")
def storage(tmp_path_factory):
    """storage_mix synthesised and turned into an ORFS design. Its folder is not called rtl/, so INIT_FILE's
    rtl/roms/big.hex is found as <folder>/roms/big.hex, as for build/rtl/<name>/."""
    root = tmp_path_factory.mktemp("storage")
    rtl = root / "chip-storage"
    (rtl / "roms").mkdir(parents=True)
    rng = random.Random(SEED)
    words = [rng.randrange(1 << 24) for _ in range(513)]
    (rtl / "roms" / "big.hex").write_text("\n".join(f"{w:06x}" for w in words) + "\n")
    (rtl / "storage_mix.v").write_text(STORAGE_V)
    (rtl / "storage_mix.f").write_text("storage_mix.v\n")
    (rtl / "config.json").write_text(json.dumps({"top": "storage_mix", "block": "storage_mix",
                                                          "params": {"clock_ns": 10.0}}))
    synth = synthesize(rtl, root / "synth")
    desc = orfs.generate(root / "synth", rtl, root / "orfs")
    return {"root": root, "rtl": rtl, "synth": synth, "desc": desc, "words": words, "dir": Path(desc["design_dir"])}


def test_synth_memory_max_bits_is_the_largest_rom(storage, design):
    assert shutil.which("make"), "GNU make is not installed (apt-get install -y make); `make test` itself needs it"
    v = make_vars(storage["dir"], ["SYNTH_MEMORY_MAX_BITS"])
    assert v["SYNTH_MEMORY_MAX_BITS"] == str(1024 * 24)       # 513 words need 10 address bits
    assert storage["desc"]["synth_memory_max_bits"] == {"value": 1024 * 24, "rom": "msh_rom_big_513x24"}
    # mac_sram's only table, 64 x 8 = 512 bits, fits ORFS's default: config.mk states only what differs
    assert "SYNTH_MEMORY_MAX_BITS" not in (design["dir"] / "config.mk").read_text()
    assert design["desc"]["synth_memory_max_bits"] == {"value": None,
                                                        "default": orfs_storage.ORFS_SYNTH_MEMORY_MAX_BITS}
    # the ROM table comes from the folder's roms/big.hex, word for word
    assert storage["desc"]["roms"][0]["source"] == str((storage["rtl"] / "roms" / "big.hex").resolve())
    text = (storage["dir"] / "src" / "msh_macros.v").read_text()
    body = text[text.index("module msh_rom_big_513x24"):]
    assert [int(v, 16) for v in re.findall(r"10'd\d+: lookup = 24'h([0-9a-f]+);", body)] == storage["words"]


def test_storage_mapping(storage):
    maps = {m["path"].split(".")[-1]: m for m in storage["desc"]["mappings"]}
    assert maps["wide_sram"]["impl"] == "flops" and maps["wide_sram"]["alternative"] == "16 x fakeram45_32x32"
    assert maps["small_sram"]["impl"] == "macros" and maps["small_sram"]["macro"] == "fakeram45_32x32"
    assert maps["big_rom"]["impl"] == "logic"
    assert storage["desc"]["srams_as_flops"] == [maps["wide_sram"]["path"]]
    assert sorted(storage["desc"]["fakerams"]) == ["fakeram45_32x32"]
    fp = json.loads((storage["dir"] / "floorplan.json").read_text())
    assert fp["std_cell_area_parts_um2"]["sram_flops_estimate"] == pytest.approx(maps["wide_sram"]["flop_um2"], abs=1e-3)
    assert len(fp["packing"]["boxes"]) == 1


ORFS_YOSYS = """\
import json, sys
from pyosys import libyosys as ys
top, out, *files = sys.argv[1:]
d = ys.Design()
def run(*cmds):
    for c in cmds:
        ys.run_pass(c, d)
run(*[f"read_liberty -lib {f}" for f in files if f.endswith(".lib")],
    *[f"read_verilog -defer -sv {f}" for f in files if f.endswith(".v")],
    f"hierarchy -check -top {top}",
    # flow/scripts/synth.tcl with SYNTH_HIERARCHICAL=1, up to the memory check (mem.json, mem_dump.py)
    "synth -run :fine", "keep_hierarchy", "synth -flatten -run coarse:fine", f"json -o {out}/mem.json",
    # then the rest of generic synthesis
    "setattr -mod -unset keep_hierarchy", "flatten", f"synth -top {top} -run fine:check -noabc",
    f"tee -q -o {out}/stat.json stat -json")
"""


def test_orfs_yosys_accepts_the_design(storage, tmp_path):
    """The generated design through the Yosys steps of ORFS's synth.tcl: every memory Yosys makes is a ROM
    table within SYNTH_MEMORY_MAX_BITS (ORFS's mem_dump.py rule: SIZE x WIDTH per memory) and some exceed
    ORFS's default (the issue); the 2 x 512 array is flip-flops, not a memory; afterwards no memory is left
    and the one macro is the fakeram45 cell. The emitted files lint clean in Verilator."""
    src = storage["dir"] / "src"
    libs = [v["lib"] for v in storage["desc"]["fakerams"].values()]
    r = subprocess.run([sys.executable, "-c", ORFS_YOSYS, "storage_mix", str(tmp_path), *libs,
                        *[str(f) for f in sorted(src.glob("*.v"))]], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    limit = storage["desc"]["synth_memory_max_bits"]["value"]
    mems = [(name, c) for mod in json.loads((tmp_path / "mem.json").read_text())["modules"].values()
            for name, c in mod["cells"].items() if c["type"].startswith("$mem")]
    sizes = [(int(c["parameters"]["SIZE"], 2), int(c["parameters"]["WIDTH"], 2), int(c["parameters"]["WR_PORTS"], 2))
             for _, c in mems]
    print("memories before mapping (size, width, write ports):", sizes)
    assert sizes and all(wr == 0 for _, _, wr in sizes), sizes                 # ROMs only
    # the random table uses all 24 bits, so Yosys's largest memory is exactly the bound config.mk sets,
    # above ORFS's default (which would stop)
    assert max(n * w for n, w, _ in sizes) == limit > orfs_storage.ORFS_SYNTH_MEMORY_MAX_BITS
    cells = json.loads((tmp_path / "stat.json").read_text())["modules"]["\\storage_mix"]["num_cells_by_type"]
    assert not any(t.startswith("$mem") for t in cells), cells
    assert cells.get("fakeram45_32x32") == 1
    assert sum(n for t, n in cells.items() if "DFF" in t) >= 2 * 512 + 512     # the array and its rdata register
    stubs = tmp_path / "fakeram.v"
    stubs.write_text(fakeram_model(32, 32))
    r = _verilator(["--lint-only", "-Wall", "-Wno-DECLFILENAME", "-Wno-UNUSEDSIGNAL", "--top-module", "storage_mix",
                    str(src / "storage_mix.v"), str(src / "msh_macros.v"), str(stubs)], tmp_path)
    assert r.returncode == 0, r.stderr


def test_local_placement_maps_alike(storage, lib, tmp_path):
    """flow.place's placement objects from the same mapping: the 2 x 512 array gets no macros (its flip-flops
    are not in the synthesised netlist, like the ROM tables), 4 x 32 its one fakeram45_32x32."""
    pdk = find_pdk()
    synth = storage["root"] / "synth"
    files = storage["synth"]["files"]
    lef = read_lefs(pdk)
    module = flatten(synth / files["sta_rtlil"], synth / files["macro_modules"], "storage_mix", lef)
    d = build_design(module, "storage_mix", lef, lib)
    assert d.flop_srams == ["wide_sram"] and d.roms == ["big_rom"]       # paths as OpenSTA sees them
    assert d.comp_master[d.n_std:] == ["fakeram45_32x32"]
    impl = {m.path: (m.impl, m.macro.name if m.macro else None) for m in d.mappings}
    assert impl == {"wide_sram": ("flops", None), "small_sram": ("macros", "fakeram45_32x32"), "big_rom": ("logic", None)}


def test_chip_presets_need_the_raised_limit():
    """The tiny and nano chips' largest tables (513 x 24) are what SYNTH_MEMORY_MAX_BITS is set from: 24,576."""
    from hw.chip_top import chip_build
    from hw.params import preset
    for name in ("tiny", "nano"):
        roms = [orfs_storage.Rom(i.depth, i.width, i.file, Path(i.file), tuple(i.words))
                for i in chip_build(preset(name)).rom_images]
        bits, rom = orfs_storage.synth_memory_max_bits(roms)
        print(f"{name}: SYNTH_MEMORY_MAX_BITS {bits} from {rom.depth} x {rom.width} ({rom.init_file})")
        assert (bits == max(orfs_storage.rom_memory_bits(r.depth, r.width) for r in roms)
                > orfs_storage.ORFS_SYNTH_MEMORY_MAX_BITS)


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
    with pytest.raises(orfs_storage.OrfsError, match=r"docker at .*no engine answers"):
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
