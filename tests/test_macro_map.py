"""flow.macro_map: every storage shape the design uses maps onto fakeram45 with its waste counted."""
import pytest

from flow.macro_map import MAX_MACROS_PER_INSTANCE, MacroMapError, macro_sizes, map_design, map_instance, table
from pdk_config import find_pdk


@pytest.fixture(scope="module")
def sizes():
    s = macro_sizes(find_pdk().fakerams)
    assert len(s) >= 20, [m.name for m in s]
    return s


# (depth, width): shapes of weight, state and scratch SRAMs a KPU instantiates
SHAPES = [(16, 8), (32, 32), (64, 32), (64, 64), (128, 64), (256, 32), (256, 64), (512, 64), (512, 128),
          (1024, 32), (1024, 128), (2048, 64), (4096, 128), (64, 256), (8192, 64)]


@pytest.mark.parametrize("depth,width", SHAPES, ids=[f"{d}x{w}" for d, w in SHAPES])
def test_every_typical_shape_maps(sizes, depth, width):
    m = map_instance("u", "msh_sram", depth, width, sizes)
    assert m.macro is not None and m.count >= 1
    assert m.rows * m.macro.depth >= depth and m.cols * m.macro.width >= width      # covers the array
    assert m.macro_bits == m.count * m.macro.depth * m.macro.width
    assert m.wasted_bits == m.macro_bits - depth * width >= 0
    assert m.area_um2 == pytest.approx(m.count * m.macro.width_um * m.macro.height_um)
    # no other single-size grid is smaller with the keep-out ring counted
    best = min(((-(-depth // s.depth)) * (-(-width // s.width)) * s.footprint_um2 for s in sizes))
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
    assert m.macro is None and m.count == 0 and m.area_um2 == 0 and "logic" in m.note


@pytest.mark.parametrize("depth,width", [(0, 32), (64, 0), (64, 12), (-4, 8)])
def test_illegal_shapes_are_rejected(sizes, depth, width):
    with pytest.raises(MacroMapError, match=f"DEPTH={depth}, WIDTH={width}"):
        map_instance("core.buf", "msh_sram", depth, width, sizes)


def test_too_large_shape_says_split(sizes):
    with pytest.raises(MacroMapError, match=f"more than {MAX_MACROS_PER_INSTANCE}.*split"):
        map_instance("core.huge", "msh_sram", 2**22, 64, sizes)


def test_no_fakerams_is_an_error():
    with pytest.raises(MacroMapError, match="no fakeram45"):
        map_instance("u", "msh_sram", 64, 32, [])


def test_unknown_type_is_an_error(sizes):
    with pytest.raises(MacroMapError, match="unknown storage type"):
        map_instance("u", "msh_cam", 64, 32, sizes)


def test_table_lists_every_instance(sizes):
    insts = [{"path": "top.a", "type": "msh_sram", "depth": 1024, "width": 128},
             {"path": "top.r", "type": "msh_rom", "depth": 64, "width": 8}]
    text = table(map_design(insts, sizes))
    assert "top.a" in text and "fakeram45_1024x32" in text and "1x4" in text
    assert "top.r" in text and "(logic)" in text
