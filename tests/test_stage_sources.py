"""verification.runner.stage_sources: the same RTL reaches Verilator under one path, wherever it was emitted."""
from __future__ import annotations

import os
import time
from pathlib import Path

from verification.runner import STAGE_MAX_AGE_S, stage_sources


def _emit(folder, files):
    folder.mkdir(parents=True)
    for name, text in files.items():
        (folder / name).write_text(text)
    return [folder / name for name in files]


def test_same_sources_share_one_path_and_others_do_not(tmp_path):
    root = tmp_path / "stage"
    a = stage_sources(_emit(tmp_path / "a", {"top.v": "module top; endmodule\n", "m.v": "module m; endmodule\n"}), root)
    b = stage_sources(_emit(tmp_path / "b", {"top.v": "module top; endmodule\n", "m.v": "module m; endmodule\n"}), root)
    assert a == b and [p.name for p in a] == ["top.v", "m.v"]
    assert [p.read_text() for p in a] == ["module top; endmodule\n", "module m; endmodule\n"]
    c = stage_sources(_emit(tmp_path / "c", {"top.v": "module top; wire x; endmodule\n",
                                             "m.v": "module m; endmodule\n"}), root)
    assert c[0].parent != a[0].parent and c[0].read_text() == "module top; wire x; endmodule\n"
    assert sorted(p.name for p in root.iterdir()) == sorted({a[0].parent.name, c[0].parent.name})


def test_a_repeated_file_name_keeps_both_files(tmp_path):
    one = _emit(tmp_path / "one", {"x.v": "module x1; endmodule\n"})
    two = _emit(tmp_path / "two", {"x.v": "module x2; endmodule\n"})
    staged = stage_sources(one + two, tmp_path / "stage")
    assert [p.read_text() for p in staged] == ["module x1; endmodule\n", "module x2; endmodule\n"]
    assert staged[0] != staged[1]


def test_a_worker_that_loses_the_race_keeps_the_winners_copy(tmp_path, monkeypatch):
    srcs = _emit(tmp_path / "a", {"top.v": "module top; endmodule\n"})
    rename = Path.rename

    def other_worker_first(self, target):       # the other worker's folder appears between check and rename
        Path(target).mkdir(parents=True)
        (Path(target) / "top.v").write_text("module top; endmodule\n")
        return rename(self, target)

    monkeypatch.setattr(Path, "rename", other_worker_first)
    staged = stage_sources(srcs, tmp_path / "stage")
    assert staged[0].read_text() == "module top; endmodule\n"
    assert [p.name for p in (tmp_path / "stage").iterdir()] == [staged[0].parent.name]


def test_folders_unused_for_a_day_are_removed(tmp_path):
    root = tmp_path / "stage"
    srcs = _emit(tmp_path / "a", {"top.v": "module top; endmodule\n"})
    first = stage_sources(srcs, root)
    old = stage_sources(_emit(tmp_path / "b", {"old.v": "module old; endmodule\n"}), root)[0].parent
    past = time.time() - STAGE_MAX_AGE_S - 60
    os.utime(old, (past, past))
    assert stage_sources(srcs, root) == first
    assert not old.exists() and first[0].exists()
