"""Output paths of the ``python -m nano_k3.*`` commands: checked before any work, so that a missing or
wrong folder stops the command at once with a message that names it and says what to do, instead of a
traceback at the end of a long run."""
from __future__ import annotations

import argparse
import os
from pathlib import Path


def _nearest_existing(path: Path) -> Path:
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def _writable(folder: Path) -> bool:
    return os.access(folder, os.W_OK | os.X_OK)


def output_file(ap: argparse.ArgumentParser, option: str, path: str | Path) -> Path:
    """``path`` as a Path if a file can be written there, else ``ap.error`` (exit status 2) saying why."""
    path = Path(path)
    folder = path.parent
    if path.is_dir():
        ap.error(f"{option} {path}: that is a folder; give a file name, e.g. {path / 'out'}")
    if not folder.is_dir():
        base = _nearest_existing(folder)
        if base.exists() and not base.is_dir():
            ap.error(f"{option} {path}: {base} is a file, not a folder")
        ap.error(f"{option} {path}: folder {folder} does not exist; create it first (mkdir -p {folder}) "
                 "or choose another path")
    if not _writable(folder):
        ap.error(f"{option} {path}: folder {folder} is not writable")
    return path


def output_folder(ap: argparse.ArgumentParser, option: str, path: str | Path) -> Path:
    """``path`` as a Path if it is a folder or can be created as one (parents included), else ``ap.error``."""
    path = Path(path)
    base = _nearest_existing(path)
    if not base.is_dir():
        ap.error(f"{option} {path}: " + ("that is a file; give a folder" if base == path
                                         else f"{base} is a file, not a folder"))
    if not _writable(base):
        ap.error(f"{option} {path}: folder {base} is not writable")
    return path
