"""Tests of ``python -m nano_k3.image`` (nano_k3.image_cli): build (with and without the command word),
show and validate on a good image, a truncated one and one with a bad descriptor hash, and clear errors
for a missing output folder or input file."""
from __future__ import annotations

import re
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from nano_k3.config import NANO
from nano_k3.image import name_hash, read_image
from nano_k3.image_cli import WORD_NAMES, main
from nano_k3.weights import generate_tokens

SEED = 20260706
ROOT = Path(__file__).resolve().parents[1]
BUILD = ("--config", "nano", "--seed", str(SEED), "--seq-len", "16", "--group", "128")


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "nano_k3.image", *map(str, args)], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)


@pytest.fixture(scope="module")
def images(tmp_path_factory) -> dict[str, Path]:
    """good.bin (built by the CLI), truncated.bin (its first 50,000 bytes), bad-hash.bin (descriptor 7's
    name hash overwritten)."""
    d = tmp_path_factory.mktemp("images")
    assert main(["build", *BUILD, "-o", str(d / "good.bin")]) == 0
    good = (d / "good.bin").read_bytes()
    (d / "truncated.bin").write_bytes(good[:50_000])
    bad = bytearray(good)
    struct.pack_into("<I", bad, 256 + 16 * 7, 0xDEADBEEF)
    (d / "bad-hash.bin").write_bytes(bytes(bad))
    return {name: d / f"{name}.bin" for name in ("good", "truncated", "bad-hash")}


# --- build ----------------------------------------------------------------------------------

def test_build_writes_image(tmp_path):
    out = tmp_path / "nano.bin"
    r = _cli("build", "--config", "nano", "--seed", SEED, "--seq-len", 48, "--group", 64, "-o", out)
    assert r.returncode == 0, r.stderr
    assert "246 descriptors" in r.stdout and "tokens 140096" in r.stdout
    parsed = read_image(out.read_bytes())
    assert parsed.cfg.group_size == 64 and parsed.layout.seq_len == 48
    assert np.array_equal(parsed.tokens, generate_tokens(NANO, 20260706, 48))


def test_build_without_command_word_is_the_same(tmp_path, images):
    """The original form (options only, as before the commands existed) still builds, byte for byte."""
    assert main([*BUILD, "-o", str(tmp_path / "old.bin")]) == 0
    assert (tmp_path / "old.bin").read_bytes() == images["good"].read_bytes()


@pytest.mark.parametrize("args,message", [
    (("--group", "96"), r"group_size must be one of \(64, 128\), got 96"),
    (("--seq-len", "65"), r"seq_len must be an integer in 1\.\.64.*got 65"),
    (("--config", "huge"), r"unknown config 'huge'; valid presets"),
    (("--seed", "-1"), r"seed must be a non-negative integer, got -1"),
], ids=["group", "seq-len", "config", "seed"])
def test_build_rejects_bad_values(tmp_path, args, message, capsys):
    argv = {"--config": "nano", "--seed": "1", "--seq-len": "8", "-o": str(tmp_path / "x.bin")}
    argv.update(dict(zip(args[0::2], args[1::2])))
    with pytest.raises(SystemExit) as e:
        main(["build", *[x for kv in argv.items() for x in kv]])
    assert e.value.code == 2
    assert re.search(message, capsys.readouterr().err)
    assert not (tmp_path / "x.bin").exists()


def test_build_missing_output_folder(tmp_path):
    out = tmp_path / "no" / "such" / "nano.bin"
    r = _cli("build", *BUILD, "-o", out)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    folder = out.parent
    assert f"error: -o {out}: folder {folder} does not exist; create it first (mkdir -p {folder})" in r.stderr
    assert not folder.exists()


# --- show -----------------------------------------------------------------------------------

def test_show_good(images):
    r = _cli("show", images["good"])
    assert r.returncode == 0, r.stderr
    out = r.stdout
    assert "config nano, group 128, seq_len 16" in out
    for i, name in WORD_NAMES.items():                       # every used header word, by name
        assert re.search(rf"^\s+{i}\s+{name}\s", out, re.M), name
    assert "0x4b444143 ('KDAC')" in out and "0x2 (L0 KDA, L1 MLA)" in out and "33..63 reserved: all 0" in out and "0: SPEC mode" in out
    # descriptor rows: names resolved from the stored hashes, shapes, value ranges, all checks passed
    assert re.search(rf"^\s+7\s+0x{name_hash('L0.kda.q.s'):08x}\s+L0\.kda\.q\.s\s+24544\s+128\s+0\s+1x64\s+i2\s+"
                     r"\d+\.\.\d+\s+ok$", out, re.M)
    assert re.search(r"^\s+245\s+0x[0-9a-f]{8}\s+head\.z\s+.*\s6\.\.9\s+ok$", out, re.M)
    assert len(re.findall(r"^\s+\d+\s+0x[0-9a-f]{8}\s+\S+.*\sok$", out, re.M)) == 246
    assert "status: 0x00000000 (no run yet, outputs empty)" in out
    assert out.rstrip().endswith("every name hash, length, aux, address, alignment and region bound checked, "
                                 "zero points in 0..15, token and argmax ids below vocab 512)")


def test_show_bad_hash(images):
    r = _cli("show", images["bad-hash"])
    assert r.returncode == 1
    row = "name hash 0xdeadbeef does not match tensor 'L0.kda.q.s' (expected 0x7300e63f)"
    assert re.search(rf"^\s+7\s+0xdeadbeef\s+\?\s+24544 .* {re.escape(row)}$", r.stdout, re.M)  # no name has it
    assert r.stdout.rstrip().endswith(f"bad-hash.bin: 1 problem\n  descriptor 7 (L0.kda.q.s): {row}")


def test_show_truncated(images):
    r = _cli("show", images["truncated"])
    assert r.returncode == 1
    assert re.search(r"^\s+73\s+.*L0\.moe\.e2\.g\.q .* bytes 49024\.\.50048 lie outside the 50000-byte file$",
                     r.stdout, re.M)
    assert re.search(r"^\s+token array \(word 24\)\s+139712\s+64 B  bytes .* outside", r.stdout, re.M)
    assert "tokens: (outside the file)" in r.stdout
    assert "truncated.bin: 2 problems" in r.stdout and "the file is truncated" in r.stdout


# --- validate -------------------------------------------------------------------------------

def test_validate_good(images):
    r = _cli("validate", images["good"])
    assert (r.returncode, r.stderr) == (0, "")
    assert r.stdout.startswith(f"{images['good']}: OK (format 1, seq_len 16, group 128, 246 descriptors")


@pytest.mark.parametrize("name,expected", [
    ("truncated", ["2 problems",
                   "  descriptor 73 (L0.moe.e2.g.q): bytes 49024..50048 lie outside the 50000-byte file",
                   "  177 more regions, descriptor 74 (L0.moe.e2.g.s) to scratch (word 28), lie outside the "
                   "50000-byte file too: the file is truncated (its header makes the image 1221200 bytes)"]),
    ("bad-hash", ["1 problem",
                  "  descriptor 7 (L0.kda.q.s): name hash 0xdeadbeef does not match tensor 'L0.kda.q.s' "
                  "(expected 0x7300e63f)"]),
])
def test_validate_bad(images, name, expected, capsys):
    assert main(["validate", str(images[name])]) == 1
    lines = capsys.readouterr().out.splitlines()
    assert lines == [f"{images[name]}: {expected[0]}", *expected[1:]]


def test_validate_exit_status_from_the_command_line(images):
    assert [_cli("validate", images[n]).returncode for n in ("good", "truncated", "bad-hash")] == [0, 1, 1]


def test_validate_missing_file(tmp_path):
    r = _cli("validate", tmp_path / "none.bin")
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert f"error: {tmp_path / 'none.bin'}: cannot read it: No such file or directory" in r.stderr


def test_help_names_every_command():
    r = _cli("--help")
    assert r.returncode == 0
    for command in ("build", "show", "validate"):
        assert f"python -m nano_k3.image {command} " in r.stdout
