"""PDK resolution: NANGATE45_PDK, ORFS platform folders, gzipped and plain liberty, clear errors."""
import gzip
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from pdk_config import PdkError, find_pdk, pdk_from_env

SHARED = pdk_from_env()   # absolute; default set by tests/conftest.py
needs_pdk = pytest.mark.skipif(not SHARED.is_dir(), reason=f"no Nangate45 PDK at {SHARED} (set NANGATE45_PDK)")


@needs_pdk
def test_shared_pdk_has_three_corners_lefs_and_fakerams(monkeypatch):
    monkeypatch.setenv("NANGATE45_PDK", str(SHARED))
    pdk = find_pdk()
    assert pdk.found_by == "NANGATE45_PDK" and pdk.corners == ("slow", "typical", "fast")
    assert pdk.tech_lef.name == "NangateOpenCellLibrary.tech.lef"
    assert pdk.cell_lef.name == "NangateOpenCellLibrary.macro.mod.lef"
    assert {(r.depth, r.width) for r in pdk.fakerams} >= {(64, 32), (256, 16), (1024, 32)}


@needs_pdk
def test_orfs_platform_with_plain_liberty(tmp_path, monkeypatch):
    """An ORFS checkout: $FLOW_HOME/platforms/nangate45 with plain .lib files, found without NANGATE45_PDK."""
    plat = tmp_path / "flow" / "platforms" / "nangate45"
    (plat / "lib").mkdir(parents=True)
    (plat / "lef").mkdir()
    with gzip.open(SHARED / "lib" / "NangateOpenCellLibrary_typical.lib.gz") as f:
        (plat / "lib" / "NangateOpenCellLibrary_typical.lib").write_bytes(f.read())
    for lef in ("NangateOpenCellLibrary.tech.lef", "NangateOpenCellLibrary.macro.mod.lef"):
        (plat / "lef" / lef).symlink_to(SHARED / "lef" / lef)
    monkeypatch.delenv("NANGATE45_PDK", raising=False)
    monkeypatch.setenv("FLOW_HOME", str(tmp_path / "flow"))
    pdk = find_pdk()
    assert pdk.found_by == "FLOW_HOME" and pdk.corners == ("typical",)
    assert pdk.plain_liberty("typical", tmp_path / "cache") == plat / "lib" / "NangateOpenCellLibrary_typical.lib"
    with pytest.raises(PdkError, match="corner 'slow' not in the PDK"):
        pdk.plain_liberty("slow", tmp_path / "cache")


def test_missing_pdk_names_the_variables_and_files(monkeypatch):
    monkeypatch.setenv("NANGATE45_PDK", "/nonexistent")
    monkeypatch.delenv("FLOW_HOME", raising=False)
    monkeypatch.delenv("ORFS_HOME", raising=False)
    with pytest.raises(PdkError) as e:
        find_pdk()
    msg = str(e.value)
    assert "NANGATE45_PDK=/nonexistent" in msg and "FLOW_HOME" in msg
    assert "NangateOpenCellLibrary_typical.lib" in msg and "NangateOpenCellLibrary.tech.lef" in msg


def test_folder_without_pdk_files_is_rejected(tmp_path, monkeypatch):
    monkeypatch.setenv("NANGATE45_PDK", str(tmp_path))
    with pytest.raises(PdkError, match="is not a Nangate45 PDK: missing"):
        find_pdk()


def test_cli_exits_nonzero_at_once_for_a_bad_pdk():
    env = {**os.environ, "NANGATE45_PDK": "/nonexistent"}
    out = subprocess.run([sys.executable, "-m", "pdk_config"], env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 1 and "NANGATE45_PDK=/nonexistent" in out.stderr


@needs_pdk
def test_relative_pdk_is_made_absolute_once(tmp_path, monkeypatch):
    """The README's relative ../shared/pdk/nangate45: taken from the current directory, written back absolute,
    so a later change of directory (or a child process started elsewhere) still finds the same folder."""
    monkeypatch.chdir(SHARED.parent)
    monkeypatch.setenv("NANGATE45_PDK", f"../{SHARED.parent.name}/{SHARED.name}")
    assert pdk_from_env() == SHARED and os.environ["NANGATE45_PDK"] == str(SHARED)
    monkeypatch.chdir(tmp_path)
    pdk = find_pdk()
    assert pdk.root == SHARED and pdk.found_by == "NANGATE45_PDK"
    assert all(p.is_absolute() and p.is_file() for p in (*pdk.liberty.values(), pdk.tech_lef, pdk.cell_lef))


def test_relative_pdk_errors_name_the_value_and_the_folder(tmp_path, monkeypatch):
    monkeypatch.delenv("FLOW_HOME", raising=False)
    monkeypatch.delenv("ORFS_HOME", raising=False)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("NANGATE45_PDK", "../no_such_pdk")
    gone = tmp_path.resolve().parent / "no_such_pdk"
    with pytest.raises(PdkError, match=re.escape(f"NANGATE45_PDK=../no_such_pdk (that is {gone}: no such directory)")):
        find_pdk()
    (tmp_path / "empty").mkdir()
    monkeypatch.setenv("NANGATE45_PDK", "empty")
    empty = tmp_path.resolve() / "empty"
    with pytest.raises(PdkError, match=re.escape(f"NANGATE45_PDK=empty (that is {empty}) is not a Nangate45 PDK")):
        find_pdk()


@needs_pdk
def test_cli_from_another_directory_with_a_relative_pdk(tmp_path):
    rel = os.path.relpath(SHARED, tmp_path)
    env = {**os.environ, "NANGATE45_PDK": rel, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    out = subprocess.run([sys.executable, "-m", "pdk_config"], env=env, cwd=tmp_path, capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0 and f"Nangate45 at {SHARED} (found by NANGATE45_PDK" in out.stdout, out.stderr
