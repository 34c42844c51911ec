#!/usr/bin/env bash
# Create or refresh .venv with the pinned toolchain; install Debian's OpenSTA when `sta` is missing (and ccache, optional).
# Idempotent: the Makefile runs it only when pyproject.toml or this script changed.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}

if [ ! -x .venv/bin/python ]; then
  echo "setup: creating .venv with $($PYTHON --version)"
  "$PYTHON" -m venv .venv
fi
# pip's own output (and the machine's pip configuration notices) go to the log; the terminal gets one
# line per stage, the log's tail when pip fails, and any deprecation warning the packaging raised.
mkdir -p build/logs
LOG=build/logs/setup.log
START=$SECONDS
echo "setup: installing the pinned toolchain into .venv (editable install of this checkout; log $LOG)"
if ! { .venv/bin/python -m pip install -q --upgrade pip && .venv/bin/python -m pip install -q -e .; } >"$LOG" 2>&1; then
  echo "setup: pip failed; the last lines of $LOG:" >&2
  tail -n 30 "$LOG" | sed 's/^/  | /' >&2
  exit 1
fi
if grep -qi "deprecat" "$LOG"; then
  echo "setup: the packaging printed deprecation warnings (fix pyproject.toml):" >&2
  grep -i "deprecat" "$LOG" | sed 's/^/  | /' >&2
fi
echo "setup: toolchain installed in $((SECONDS - START)) s"

if ! command -v sta >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "setup: installing Debian's opensta (provides sta)"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq opensta >/dev/null
  else
    echo "setup: OpenSTA ('sta') is missing. Install it with: sudo apt-get update && sudo apt-get install -y opensta" >&2
    exit 1
  fi
fi
# ccache is optional: with it a Verilator model built a second time (the same RTL in another test's folder)
# compiles from the cache (the tiny chip: 15 s instead of 150 s here); without it every build compiles anew.
if ! command -v ccache >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "setup: installing Debian's ccache (Verilator builds reuse compiled C++)"
    { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq ccache >/dev/null; } \
      || echo "setup: ccache could not be installed; Verilator builds compile without it" >&2
  else
    echo "setup: note: ccache is missing (optional; faster repeated Verilator builds): sudo apt-get install -y ccache" >&2
  fi
fi
touch .venv/.installed
echo "setup: done"
