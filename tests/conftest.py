"""Shared test setup: the Nangate45 PDK every flow test uses.

``NANGATE45_PDK`` keeps its value when set (CI sets it); otherwise it defaults to the shared PDK folder
beside the repository (../shared/pdk/nangate45), the layout of a development checkout. Tests that need a
bad value change it with ``monkeypatch``, which restores it afterwards.
"""
import os
from pathlib import Path

os.environ.setdefault("NANGATE45_PDK", str(Path(__file__).resolve().parents[2] / "shared" / "pdk" / "nangate45"))
