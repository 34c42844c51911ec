"""The results file: one SQLite database (stdlib sqlite3) with every trial's numbers and every validation.

``dse_trials``: one row per trial, whatever became of it (``status`` ok / illegal / failed, ``reason``),
keyed by ``flow.dse.trial.trial_key``; the record's scalars are columns, the point and the engine areas JSON.
``dse_validations``: one row per validated point (``flow/dse/validate.py``), estimate and measurement side by
side. Written only by the process that drives the sweep, so a cluster's workers never share the file.
"""
from __future__ import annotations

import json
import sqlite3
import time
from pathlib import Path

TRIAL_COLUMNS = {          # column -> SQLite type; every other key of a record is ignored
    "key": "TEXT PRIMARY KEY", "number": "INTEGER", "preset": "TEXT", "chip": "TEXT", "design": "TEXT",
    "point": "TEXT", "status": "TEXT", "within_budget": "INTEGER", "reason": "TEXT",
    "group_size": "INTEGER", "seq_len": "INTEGER", "model_cycles": "INTEGER", "cycles_per_token": "REAL",
    "tokens_per_s": "REAL", "logic_um2": "REAL", "macro_um2": "REAL", "area_um2": "REAL", "area_mm2": "REAL",
    "macro_bits": "INTEGER", "cells": "INTEGER", "parts": "INTEGER", "parts_mapped": "INTEGER",
    "engines": "TEXT", "period_ns": "REAL", "slow_wns_ns": "REAL", "slow_min_period_ns": "REAL",
    "rtl_s": "REAL", "synth_s": "REAL", "sta_s": "REAL", "wall_s": "REAL", "reused": "INTEGER",
    "host": "TEXT", "ray_node": "TEXT", "started_unix": "REAL", "recorded_unix": "REAL", "log": "TEXT",
}
VALIDATION_COLUMNS = {
    "key": "TEXT PRIMARY KEY", "preset": "TEXT", "point": "TEXT", "passed": "INTEGER", "reason": "TEXT",
    "sim_run": "TEXT", "bit_exact": "INTEGER", "model_cycles": "INTEGER", "sim_cycles": "INTEGER",
    "cycles_error": "REAL", "parts_area_um2": "REAL", "full_area_um2": "REAL", "area_error": "REAL",
    "sim_s": "REAL", "synth_s": "REAL", "sim_log": "TEXT", "recorded_unix": "REAL",
}
JSON_COLUMNS = ("point", "engines")


def _table(con: sqlite3.Connection, name: str, columns: dict[str, str]) -> None:
    """Creates the table, or adds the columns a file written by an older version lacks."""
    con.execute(f"CREATE TABLE IF NOT EXISTS {name} ({', '.join(f'{k} {t}' for k, t in columns.items())})")
    have = {row[1] for row in con.execute(f"PRAGMA table_info({name})")}
    for k, t in columns.items():
        if k not in have:
            con.execute(f"ALTER TABLE {name} ADD COLUMN {k} {t.replace(' PRIMARY KEY', '')}")


class Results:
    """The results file at ``path`` (created with its tables when missing)."""

    def __init__(self, path: Path):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self._con() as con:
            _table(con, "dse_trials", TRIAL_COLUMNS)
            _table(con, "dse_validations", VALIDATION_COLUMNS)

    def _con(self) -> sqlite3.Connection:
        con = sqlite3.connect(self.path, timeout=60)
        con.row_factory = sqlite3.Row
        return con

    @staticmethod
    def _row(rec: dict, columns: dict[str, str]) -> dict:
        row = {k: rec.get(k) for k in columns}
        for k in JSON_COLUMNS:
            if k in row and row[k] is not None:
                row[k] = json.dumps(row[k], sort_keys=True)
        return row | {"recorded_unix": round(time.time(), 1)}

    def _put(self, table: str, row: dict) -> None:
        with self._con() as con:
            con.execute(f"INSERT OR REPLACE INTO {table} ({', '.join(row)}) VALUES ({', '.join('?' * len(row))})",
                        list(row.values()))

    def add_trial(self, rec: dict) -> int:
        """Stores a trial record (``flow.dse.trial.evaluate``) and returns its number (1, 2, ... per preset); a
        point recorded before keeps its row and number (the search proposed it again), unless it failed then and
        has numbers now."""
        old = self.trial(rec["key"])
        if old and (old["status"] != "failed" or rec["status"] == "failed"):
            return old["number"]
        number = old["number"] if old else self.count(rec["preset"]) + 1
        self._put("dse_trials", self._row(rec | {"number": number, "group_size": rec.get("group")}, TRIAL_COLUMNS))
        return number

    def add_validation(self, rec: dict) -> None:
        self._put("dse_validations", self._row(rec, VALIDATION_COLUMNS))

    def _decode(self, row: sqlite3.Row) -> dict:
        d = dict(row)
        for k in JSON_COLUMNS:
            if d.get(k) is not None:
                d[k] = json.loads(d[k])
        return d

    def trial(self, key: str) -> dict | None:
        with self._con() as con:
            row = con.execute("SELECT * FROM dse_trials WHERE key = ?", (key,)).fetchone()
        return self._decode(row) if row else None

    def trials(self, preset: str | None = None) -> list[dict]:
        q, args = "SELECT * FROM dse_trials", ()
        if preset is not None:
            q, args = q + " WHERE preset = ?", (preset,)
        with self._con() as con:
            return [self._decode(r) for r in con.execute(q + " ORDER BY number", args)]

    def validations(self, preset: str | None = None) -> list[dict]:
        q, args = "SELECT * FROM dse_validations", ()
        if preset is not None:
            q, args = q + " WHERE preset = ?", (preset,)
        with self._con() as con:
            return [self._decode(r) for r in con.execute(q, args)]

    def count(self, preset: str) -> int:
        with self._con() as con:
            return con.execute("SELECT COUNT(*) FROM dse_trials WHERE preset = ?", (preset,)).fetchone()[0]
