"""Shared test setup: the Nangate45 PDK every flow test uses.

``NANGATE45_PDK`` keeps its value when set (CI sets it, relative like the README's ../shared/pdk/nangate45);
otherwise it defaults to the shared PDK folder beside the repository (../shared/pdk/nangate45), the layout of
a development checkout. Either way ``pdk_from_env`` makes it absolute here, before any test changes directory
or starts a tool elsewhere; tests read it through ``pdk_from_env`` too, never ``os.environ``. Tests that need a
bad value change it with ``monkeypatch``, which restores it afterwards.
"""
import os
from pathlib import Path

from pdk_config import pdk_from_env

os.environ.setdefault("NANGATE45_PDK", str(Path(__file__).resolve().parents[2] / "shared" / "pdk" / "nangate45"))
pdk_from_env()
