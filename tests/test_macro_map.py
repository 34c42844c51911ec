"""flow.macro_map: every storage shape the design uses maps onto fakeram45 with its waste counted, or onto
flip-flops where those take less area."""
import dataclasses
from pathlib import Path

import pytest

from flow.macro_map import (MAX_MACROS_PER_INSTANCE, MacroMapError, StorageLib, flop_area_um2, flop_depth_limit,
                            map_design, map_instance, storage_lib, table, wrapper_area_um2)
from pdk_config import find_pdk

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def sizes() -> StorageLib:
    s = storage_lib(find_pdk(), REPO / "build" / "pdk_cache")
    assert len(s.macros) >= 20, [m.name for m in s.macros]
    return s


# (depth, width): shapes of weight, state and scratch SRAMs a KPU instantiates
SHAPES = [(16, 8), (32, 32), (64, 32), (64, 64), (128, 64), (256, 32), (256, 64), (512, 64), (512, 128),
          (1024, 32), (1024, 128), (2048, 64), (4096, 128), (64, 256), (8192, 64)]


@pytest.mark.parametrize("depth,width", SHAPES, ids=[f"{d}x{w}" for d, w in SHAPES])
def test_every_typical_shape_maps(sizes, depth, width):
    m = map_instance("u", "msh_sram", depth, width, sizes)
    assert m.impl == "macros" and m.macro is not None and m.count >= 1
    assert m.rows * m.macro.depth >= depth and m.cols * m.macro.width >= width      # covers the array
    assert m.macro_bits == m.count * m.macro.depth * m.macro.width
    assert m.wasted_bits == m.macro_bits - depth * width >= 0
    assert m.area_um2 == pytest.approx(m.count * m.macro.width_um * m.macro.height_um)
    # no other single-size grid is smaller with the keep-out ring counted
    best = min(((-(-depth // s.depth)) * (-(-width // s.width)) * s.footprint_um2 for s in sizes.macros))
    assert m.count * m.macro.footprint_um2 == pytest.approx(best)


def test_exact_shapes_waste_nothing(sizes):
    m = map_instance("u", "msh_sram", 1024, 128, sizes)
    assert (m.macro.name, m.rows, m.cols, m.wasted_bits) == ("fakeram45_1024x32", 1, 4, 0)
    assert map_instance("u", "msh_sram", 64, 32, sizes).macro.name == "fakeram45_64x32"


def test_small_shape_reports_its_waste(sizes):
    m = map_instance("u", "msh_sram", 16, 8, sizes)
    assert m.count == 1 and m.wasted_bits == m.macro_bits - 128 > 0
    assert 0 < m.as_dict()["waste"] < 1


def test_rom_maps_to_logic(sizes):
    m = map_instance("lut", "msh_rom", 256, 16, sizes)
    assert m.macro is None and m.impl == "logic" and m.count == 0 and m.area_um2 == 0 and "logic" in m.note


@pytest.mark.parametrize("depth,width", [(0, 32), (64, 0), (64, 12), (-4, 8)])
def test_illegal_shapes_are_rejected(sizes, depth, width):
    with pytest.raises(MacroMapError, match=f"DEPTH={depth}, WIDTH={width}"):
        map_instance("core.buf", "msh_sram", depth, width, sizes)


def test_too_large_shape_says_split(sizes):
    with pytest.raises(MacroMapError, match=f"more than {MAX_MACROS_PER_INSTANCE}.*split"):
        map_instance("core.huge", "msh_sram", 2**22, 64, sizes)


def test_no_fakerams_is_an_error(sizes):
    with pytest.raises(MacroMapError, match="no fakeram45"):
        map_instance("u", "msh_sram", 64, 32, dataclasses.replace(sizes, macros=()))


def test_unknown_type_is_an_error(sizes):
    with pytest.raises(MacroMapError, match="unknown storage type"):
        map_instance("u", "msh_cam", 64, 32, sizes)


def test_table_lists_every_instance(sizes):
    insts = [{"path": "top.a", "type": "msh_sram", "depth": 1024, "width": 128},
             {"path": "top.r", "type": "msh_rom", "depth": 64, "width": 8}]
    text = table(map_design(insts, sizes))
    assert "top.a" in text and "fakeram45_1024x32" in text and "1x4" in text
    assert "top.r" in text and "(logic)" in text


# ---------------------------------------------------------------------------------------------- flip-flops

def test_cell_areas_come_from_the_liberty(sizes):
    """Nangate45 typical: DFF_X1 4.522, MUX2_X1 1.862, AND2_X1 1.064 um2 (docs/macro_mapping.md quotes them)."""
    assert (sizes.dff_um2, sizes.mux2_um2, sizes.and2_um2) == (4.522, 1.862, 1.064)
    # 2 x 512: 1024 stored bits (DFF + hold mux), a 2:1 read mux and the rdata register per bit, 2 x 64 enables
    assert flop_area_um2(2, 512, sizes) == pytest.approx(1024 * 6.384 + 512 * 1.862 + 512 * 6.384 + 128 * 1.064)
    assert wrapper_area_um2(512, 1, sizes) == pytest.approx(512 * 6.384 + 2 * 4.522)


def test_two_by_512_maps_to_flops(sizes):
    """The issue's example: 2 x 512 was 16 fakeram45_32x32 (12,712 um2 of macros + 3,278 of wrapper)."""
    m = map_instance("core.q_buf", "msh_sram", 2, 512, sizes)
    assert m.impl == "flops" and m.macro is None and m.count == 0 and m.area_um2 == 0
    assert m.alternative == "16 x fakeram45_32x32"
    assert m.flop_um2 == pytest.approx(10895.36) and m.macro_option_um2 == pytest.approx(16 * 19.57 * 40.6 + 512 * 6.384 + 2 * 4.522)
    assert m.as_dict()["impl"] == "flops" and "(flops)" in table([m])


# (width, last depth as flip-flops, the macro the next depth maps to): docs/macro_mapping.md's table
THRESHOLDS = [(8, 10, "fakeram45_64x15"), (16, 6, "fakeram45_32x32"), (32, 3, "fakeram45_32x32"),
              (128, 3, "fakeram45_32x32"), (512, 3, "fakeram45_32x32")]


@pytest.mark.parametrize("width,depth,macro", THRESHOLDS, ids=[f"w{w}" for w, _, _ in THRESHOLDS])
def test_threshold_just_below_and_above(sizes, width, depth, macro):
    below = map_instance("u", "msh_sram", depth, width, sizes)
    above = map_instance("u", "msh_sram", depth + 1, width, sizes)
    print(f"{depth}x{width}: flops {below.flop_um2:.1f} < {below.macro_option_um2:.1f}; "
          f"{depth + 1}x{width}: flops {above.flop_um2:.1f} > {above.macro_option_um2:.1f} ({above.macro.name})")
    assert below.impl == "flops" and below.flop_um2 < below.macro_option_um2
    assert above.impl == "macros" and above.flop_um2 > above.macro_option_um2 and above.macro.name == macro
    assert flop_depth_limit(width, sizes) == depth


def test_flops_need_no_macro_count_limit(sizes):
    """A very wide, shallow array is flops even where its macro grid would be over the limit."""
    m = map_instance("u", "msh_sram", 2, 32 * (MAX_MACROS_PER_INSTANCE + 1), sizes)
    assert m.impl == "flops"
