#!/usr/bin/env bash
# Creates .venv and installs everything the project needs. Idempotent: a second run installs nothing new.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ ! -x .venv/bin/python ]; then
  python3 -m venv .venv
fi
.venv/bin/python -m pip install -q --upgrade pip
# torch first, on its own: this exact pin resolves to a CPU build; a looser spec would pull a CUDA build of several GB.
.venv/bin/python -m pip install -q torch==2.13.0
.venv/bin/python -m pip install -q -r requirements.txt
