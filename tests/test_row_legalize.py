"""flow.row_legalize (legalisation after global placement) and flow.place_nets (the nets the placer sees)."""
import random
from types import SimpleNamespace

import pytest

import flow.place_nets as place_nets
from flow.place_netlist import PlaceError
from flow.row_legalize import FILL, Stretch, legalize_rows, pack

STEP = 10


def _check_legal(stretches, legal, widths):
    """Every cell inside one stretch, on its grid, in its orientation, no two overlapping."""
    per_row = {}
    for i, (x, y, o) in legal.items():
        s = next((s for s in stretches if s.y == y and s.x0 <= x and x + widths[i] <= s.x1), None)
        assert s is not None, f"cell {i} at ({x}, {y}) is in no stretch"
        assert (x - s.x0) % STEP == 0 and o == s.orient
        per_row.setdefault(y, []).append((x, x + widths[i]))
    for spans in per_row.values():
        spans.sort()
        assert all(a[1] <= b[0] for a, b in zip(spans, spans[1:]))


def test_pack_pushes_overlaps_apart_and_keeps_the_stretch():
    xs, widths = [0, 5, 5, 95], [20, 20, 10, 20]
    assert pack([0, 1, 2, 3], xs, widths, 0, 100, STEP) == [0, 20, 40, 80]
    assert pack([0], [-30], [20], 0, 100, STEP) == [0] and pack([0], [130], [20], 0, 100, STEP) == [80]


def test_cells_go_to_the_nearest_row_and_hardly_move():
    stretches = [Stretch(y, 0, 1000, "N" if y % 20 == 0 else "FS") for y in range(0, 200, 10)]
    rng = random.Random(1)
    n = 400                                  # 400 cells of 20: 40 % of the rows
    xs = [rng.randrange(0, 980) for _ in range(n)]
    ys = [rng.randrange(0, 190) for _ in range(n)]
    widths = [20] * n
    legal, stats = legalize_rows(stretches, list(range(n)), xs, ys, widths, STEP)
    _check_legal(stretches, legal, widths)
    assert stats["cells_spilled"] == 0
    assert all(abs(legal[i][1] - ys[i]) <= 5 for i in range(n))        # its nearest row
    assert stats["mean_move_dbu"] < 40                                  # 2 widths: x barely moves


def test_an_overfull_stretch_spills_to_the_rows_beside_it():
    stretches = [Stretch(0, 0, 100, "N"), Stretch(10, 0, 100, "FS"), Stretch(10, 200, 300, "FS"),
                 Stretch(20, 0, 100, "N")]
    n = 9                                    # 180 of cells aimed at row 10's first stretch (100 long)
    xs, ys, widths = [10 * i for i in range(n)], [10 + (i % 3 - 1) * 3 for i in range(n)], [20] * n
    legal, stats = legalize_rows(stretches, list(range(n)), xs, ys, widths, STEP)
    _check_legal(stretches, legal, widths)
    in_row = [sum(w for i, w in enumerate(widths) if legal[i][1] == y and legal[i][0] < 100) for y in (0, 10, 20)]
    assert in_row[1] <= FILL * 100 and stats["cells_spilled"] == n - in_row[1] // 20
    # the cells that left were those farthest from the row, to the row on their own side
    assert all(legal[i][1] == 10 for i in range(n) if ys[i] == 10)


def test_no_room_is_an_error_that_says_so():
    with pytest.raises(PlaceError, match="too full"):
        legalize_rows([Stretch(0, 0, 100, "N")], [0, 1, 2, 3, 4, 5], [0] * 6, [0] * 6, [20] * 6, STEP)


# ---------------------------------------------------------------------------------------------- place_nets

def _design(masters, nets):
    return SimpleNamespace(comp_master=masters, n_std=len(masters), net_pins=nets)


def _pin(obj, pin, drives):
    return (obj, pin, 0, 0, None, drives)


def test_buffer_chains_become_their_logical_net():
    # 0 drives buffer 1, which drives cell 2 and buffer 3, which drives cells 4 and 5; buffer 6 drives a port
    masters = ["NAND2_X1", "BUF_X1", "INV_X1", "CLKBUF_X2", "DFF_X1", "DFF_X1", "BUF_X2"]
    nets = [[_pin(0, "ZN", True), _pin(1, "A", False), _pin(6, "A", False)],
            [_pin(1, "Z", True), _pin(2, "A", False), _pin(3, "A", False)],
            [_pin(3, "Z", True), _pin(4, "D", False), _pin(5, "D", False)],
            [_pin(6, "Z", True), _pin(-1, "PIN", False)]]
    d = _design(masters, nets)
    merged, ignored = place_nets.placement_nets(d)
    assert ignored == 0
    assert sorted(sorted(p[0] for p in pins) for pins in merged) == [[-1, 6], [0, 2, 4, 5, 6]]
    assert place_nets.placement_nets(d, through_buffers=False) == (nets, 0)


def test_a_logical_net_above_the_fanout_limit_is_ignored(monkeypatch):
    monkeypatch.setattr(place_nets, "MAX_PLACE_FANOUT", 4)
    masters = ["NAND2_X1", "BUF_X1"] + ["DFF_X1"] * 4
    nets = [[_pin(0, "ZN", True), _pin(1, "A", False), _pin(2, "D", False), _pin(3, "D", False)],
            [_pin(1, "Z", True), _pin(4, "D", False), _pin(5, "D", False)]]
    assert place_nets.placement_nets(_design(masters, nets)) == ([], 1)      # 5 pins through the buffer
    assert place_nets.placement_nets(_design(masters, nets), through_buffers=False) == (nets, 0)
