#!/usr/bin/env bash
# Creates .venv and installs everything the project needs: torch (the CPU build where PyTorch's CPU index can be
# reached), then requirements.txt. Idempotent: a second run installs nothing new. Progress goes to stdout, one
# `setup:` line per stage; a failure is one `error:` line and what to do, with the exit codes of workload/cli.py
# (3: this machine's set-up).
#
#   PYTHON=python3.12 bash scripts/setup.sh     # choose the interpreter (default: the first of python3,
#                                               # python3.13, python3.12, python3.11 that is 3.11 or newer)
#   TORCH_CPU_INDEX=https://mirror/whl/cpu ...  # another CPU index; TORCH_CPU_INDEX= takes the default index's
set -euo pipefail
cd "$(dirname "$0")/.."
TORCH_VERSION=2.13.0   # the version the tests ran against; the cluster's image has 2.13 too
FP8_PACKAGES=.venv/fp8  # torchao for --fp8, apart from .venv's site-packages (below)
MIN_PYTHON=3.11        # what the tests run on (3.11: contextlib.chdir); the cluster's image runs 3.13
started=$SECONDS

fail() { echo "error: $1" >&2; [ -n "${2:-}" ] && echo "$2" >&2; exit 3; }
version_of() { "$1" -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null; }
new_enough() { "$1" -c "import sys; sys.exit(sys.version_info[:2] < tuple(map(int, '$MIN_PYTHON'.split('.'))))" 2>/dev/null; }

python=""
if [ -n "${PYTHON:-}" ]; then
  command -v "$PYTHON" >/dev/null || fail "PYTHON=$PYTHON: no such command" "set PYTHON to a Python $MIN_PYTHON or newer"
  new_enough "$PYTHON" || fail "PYTHON=$PYTHON is Python $(version_of "$PYTHON" || echo '?'); the project needs $MIN_PYTHON or newer" \
    "install one (e.g. apt-get install python3.11 python3.11-venv) and set PYTHON to it"
  python=$PYTHON
else
  for candidate in python3 python3.13 python3.12 python3.11; do
    if command -v "$candidate" >/dev/null && new_enough "$candidate"; then python=$candidate; break; fi
  done
  [ -n "$python" ] || fail "no Python $MIN_PYTHON or newer on PATH (python3 is $(version_of python3 || echo 'missing'))" \
    "install one (e.g. apt-get install python3.11 python3.11-venv), or set PYTHON=/path/to/python3.11"
fi
wanted=$(version_of "$python")
echo "setup: Python $wanted ($(command -v "$python"))"

# A .venv made by another interpreter (an older attempt, a removed pyenv version) breaks every later run: rebuild it.
if [ -e .venv ] && [ "$(version_of .venv/bin/python || echo none)" != "$wanted" ]; then
  echo "setup: .venv was made by Python $(version_of .venv/bin/python || echo '(broken)'); rebuilding it with $wanted"
  rm -rf .venv
fi
if [ ! -x .venv/bin/python ]; then
  echo "setup: creating .venv"
  "$python" -m venv .venv || fail "\`$python -m venv .venv\` failed" \
    "on Debian or Ubuntu: apt-get install python$wanted-venv; then run this again"
fi
.venv/bin/python -m pip install -q --upgrade pip
# The repository on .venv's path, as `pip install -e .` would put it: `.venv/bin/python -m workload.local` then
# works from any directory, not only from here.
echo "$PWD" > "$(.venv/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/raytrain-eks.pth"

installed=$(.venv/bin/python -c 'import importlib.metadata as m; print(m.version("torch"))' 2>/dev/null || true)
if [ "${installed%%+*}" = "$TORCH_VERSION" ]; then
  echo "setup: torch $installed already installed"
else
  echo "setup: installing torch==$TORCH_VERSION (one download of a few hundred MB on a fresh machine)"
  mapfile -t index < <(.venv/bin/python scripts/torch_build.py source "$TORCH_VERSION")
  # torch on its own, first: the CPU index is an extra index for torch alone, never for requirements.txt.
  if ! .venv/bin/python -m pip install -q "${index[@]}" "torch==$TORCH_VERSION"; then
    [ ${#index[@]} -gt 0 ] || fail "pip could not install torch==$TORCH_VERSION" "see pip's message above"
    echo "setup: the CPU index failed; taking the default index's build"
    .venv/bin/python -m pip install -q "torch==$TORCH_VERSION" || fail "pip could not install torch==$TORCH_VERSION"
  fi
fi
.venv/bin/python scripts/torch_build.py describe
echo "setup: installing requirements.txt"
.venv/bin/python -m pip install -q -r requirements.txt || fail "pip could not install requirements.txt" \
  "see pip's message above; a second run continues where this one stopped"
# torchao, for --fp8 only, in a folder of its own beside .venv's packages: transformers imports torchao whenever it is
# installed (its quantizer registry), which costs every model build a second and prints torchao's extension-loading
# warnings. tests/unit/test_fp8.py puts the folder on its path; the cluster's job installs torchao only with trainFp8.
fp8_pin=$(sed -n 's/^TORCHAO_REQUIREMENT = "\(.*\)"$/\1/p' workload/model/fp8.py 2>/dev/null || true)  # its one pin
if [ -n "$fp8_pin" ] && [ ! -d "$FP8_PACKAGES/torchao" ]; then
  echo "setup: installing $fp8_pin into $FP8_PACKAGES (for --fp8 and its tests only)"
  .venv/bin/python -m pip install -q --no-deps --target "$FP8_PACKAGES" "$fp8_pin" || fail "pip could not install $fp8_pin"
fi
echo "setup: done in $((SECONDS - started)) s: run commands with .venv/bin/python -m ..."
