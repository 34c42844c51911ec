"""Tests of nano_k3.out_paths: a bad output path stops a command at once, naming the folder and what to
do, for every ``python -m nano_k3.*`` command that writes a file or folder."""
from __future__ import annotations

import argparse

import pytest

from nano_k3 import divergence, image_cli, luts, precision
from nano_k3.out_paths import output_file, output_folder


def _error(capsys, call) -> str:
    with pytest.raises(SystemExit) as e:
        call()
    assert e.value.code == 2
    return capsys.readouterr().err


def test_output_file(tmp_path, capsys):
    ap = argparse.ArgumentParser(prog="cmd")
    assert output_file(ap, "-o", tmp_path / "x.bin") == tmp_path / "x.bin"
    missing = tmp_path / "a" / "b"
    err = _error(capsys, lambda: output_file(ap, "-o", missing / "x.bin"))
    assert (f"cmd: error: -o {missing / 'x.bin'}: folder {missing} does not exist; create it first "
            f"(mkdir -p {missing}) or choose another path") in err
    (tmp_path / "f").write_text("")
    err = _error(capsys, lambda: output_file(ap, "-o", tmp_path / "f" / "x.bin"))
    assert f"-o {tmp_path / 'f' / 'x.bin'}: {tmp_path / 'f'} is a file, not a folder" in err
    err = _error(capsys, lambda: output_file(ap, "-o", tmp_path))
    assert f"-o {tmp_path}: that is a folder; give a file name" in err


def test_output_folder(tmp_path, capsys):
    ap = argparse.ArgumentParser(prog="cmd")
    assert output_folder(ap, "-o", tmp_path / "new" / "roms") == tmp_path / "new" / "roms"  # created later
    assert not (tmp_path / "new").exists()
    (tmp_path / "f").write_text("")
    err = _error(capsys, lambda: output_folder(ap, "-o", tmp_path / "f"))
    assert f"-o {tmp_path / 'f'}: that is a file; give a folder" in err
    err = _error(capsys, lambda: output_folder(ap, "-o", tmp_path / "f" / "r"))
    assert f"{tmp_path / 'f'} is a file, not a folder" in err


# Every nano_k3 command with an output path, with arguments that would otherwise run (the check comes first).
COMMANDS = {
    "image": (image_cli.main, ["build", "--seed", "1", "--seq-len", "4", "-o"], "-o"),
    "precision": (precision.main, ["--seeds", "1", "--json"], "--json"),
    "divergence": (divergence.main, ["--seed", "0", "--json"], "--json"),
}


@pytest.mark.parametrize("command", list(COMMANDS))
def test_commands_reject_a_missing_folder(command, tmp_path, capsys):
    main, argv, option = COMMANDS[command]
    out = tmp_path / "missing" / "out"
    err = _error(capsys, lambda: main([*argv, str(out)]))
    assert f"python -m nano_k3.{command}" in err
    assert f"{option} {out}: folder {out.parent} does not exist; create it first (mkdir -p {out.parent})" in err


def test_luts_rejects_a_file_as_folder(tmp_path, capsys):
    (tmp_path / "f").write_text("")
    err = _error(capsys, lambda: luts.main(["-o", str(tmp_path / "f" / "roms")]))
    assert f"python -m nano_k3.luts: error: -o {tmp_path / 'f' / 'roms'}: {tmp_path / 'f'} is a file" in err
