#!/usr/bin/env bash
# Create or refresh .venv with the pinned toolchain, and install Debian's OpenSTA when `sta` is missing.
# Idempotent: the Makefile runs it only when pyproject.toml or this script changed.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}

if [ ! -x .venv/bin/python ]; then
  echo "setup: creating .venv with $($PYTHON --version)"
  "$PYTHON" -m venv .venv
fi
echo "setup: installing the pinned toolchain into .venv (editable install of this checkout)"
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q -e .

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
touch .venv/.installed
echo "setup: done"
