"""Verilator builds go through ccache when it is installed (flow.toolchain.objcache): the same model built in a
second folder, as the tests that each build the tiny chip do, compiles from the cache."""
import os
import shutil
import subprocess

import pytest

from flow.toolchain import objcache
from verification.runner import MODELS, _tool_environ

needs_ccache = pytest.mark.skipif(shutil.which("ccache") is None,
                                  reason="ccache is not installed (optional; tools/setup.sh installs it as root)")


def _stats(cache_dir) -> dict[str, int]:
    out = subprocess.run(["ccache", "--print-stats"], env={**os.environ, "CCACHE_DIR": str(cache_dir)},
                         capture_output=True, text=True, check=True).stdout
    return {k: int(v) for k, v in (line.split("\t") for line in out.splitlines() if "\t" in line) if v.isdigit()}


@needs_ccache
def test_verilator_makeflags_name_ccache_unless_turned_off(monkeypatch):
    monkeypatch.delenv("NANO_K3_CCACHE", raising=False)
    with _tool_environ():
        assert f"OBJCACHE={shutil.which('ccache')}" in os.environ["MAKEFLAGS"].split()
    monkeypatch.setenv("NANO_K3_CCACHE", "0")
    assert objcache() is None
    with _tool_environ():
        assert "OBJCACHE" not in os.environ.get("MAKEFLAGS", "")


@needs_ccache
def test_second_build_in_another_folder_compiles_from_the_cache(tmp_path, monkeypatch):
    from cocotb_tools.runner import get_runner
    monkeypatch.delenv("NANO_K3_CCACHE", raising=False)
    cache = tmp_path / "ccache"

    def build(folder: str) -> dict[str, int]:
        with _tool_environ({"CCACHE_DIR": str(cache)}):
            get_runner("verilator").build(sources=[MODELS / "msh_rom.v"], hdl_toplevel="msh_rom",
                                          build_dir=tmp_path / folder, log_file=tmp_path / f"{folder}.log",
                                          always=True)
        return _stats(cache)

    first = build("a")
    assert first.get("cache_miss", 0) > 0 and first.get("direct_cache_hit", 0) == 0, first
    second = build("b")
    hits = second.get("direct_cache_hit", 0) + second.get("preprocessed_cache_hit", 0)
    assert hits >= first["cache_miss"] - 2, (first, second)     # all but the precompiled header's objects


def test_models_are_built_for_build_speed_unless_asked_for_simulation_speed():
    from verification.runner import BUILD_OPT, SIM_OPT
    with _tool_environ():
        assert f"OPT_FAST={BUILD_OPT}" in os.environ["MAKEFLAGS"].split()
    with _tool_environ(opt=SIM_OPT):
        assert f"OPT_FAST={SIM_OPT}" in os.environ["MAKEFLAGS"].split()
    assert BUILD_OPT != SIM_OPT


def test_only_runs_of_a_long_configuration_get_a_model_built_for_simulation_speed():
    from verification.runner import BUILD_OPT, SIM_OPT, model_opt
    assert model_opt(["tiny", "nano"]) == SIM_OPT
    assert model_opt(["tiny", "ci"]) == BUILD_OPT
    assert model_opt([]) == BUILD_OPT


def test_the_files_digest_follows_names_contents_and_order(tmp_path):
    from flow.toolchain import named_files_digest
    a, b = tmp_path / "a.v", tmp_path / "b.v"
    a.write_text("module a; endmodule\n")
    b.write_text("module b; endmodule\n")
    base = named_files_digest([a, b])
    assert named_files_digest([b, a]) != base
    moved = tmp_path / "x"
    moved.mkdir()
    (moved / "a.v").write_text(a.read_text())
    assert named_files_digest([moved / "a.v", b]) == base      # the folder does not count, the name does
    (moved / "c.v").write_text(a.read_text())
    assert named_files_digest([moved / "c.v", b]) != base
    b.write_text("module b2; endmodule\n")
    assert named_files_digest([a, b]) != base


def test_a_subprocess_finds_the_project_modules_first():
    from flow.toolchain import REPO, repo_pythonpath
    assert repo_pythonpath({}) == str(REPO)
    assert repo_pythonpath({"PYTHONPATH": "/x"}).split(os.pathsep) == [str(REPO), "/x"]
