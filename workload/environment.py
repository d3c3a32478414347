"""A command run by an interpreter that cannot run it: too old a Python, or one without the project's packages
(the system's `python3` instead of `.venv/bin/python`). Checked when a package of the project is imported to run
one of its commands (`python -m workload.local`), so the user reads one line saying how to run it, exit 3, instead
of a SyntaxError or a `ModuleNotFoundError` traceback from deep inside an import.

Standard library only, and cheap: `importlib.util.find_spec` finds a package without importing it.
"""
from __future__ import annotations

import importlib.util
import sys

MIN_PYTHON = (3, 11)
ENVIRONMENT = 3  # workload/cli.py's exit code for "the environment"; not imported, as cli may not import here


def command_module() -> str | None:
    """The module of `python -m MODULE ...` while Python locates it (sys.argv[0] is then "-m", the docs of
    sys.argv); None for an import from code, which gets the plain ImportError to handle as it likes."""
    if sys.argv[:1] != ["-m"]:
        return None
    argv = getattr(sys, "orig_argv", [])  # 3.10+; older Pythons are refused for their version anyway
    return argv[argv.index("-m") + 1] if "-m" in argv[:-1] else ""


def check_interpreter(package: str, needs: tuple[str, ...]) -> None:
    """Exit 3 with one line when `python -m <package>.<module>` runs on an interpreter that cannot run it."""
    module = command_module()
    if module is None or not (module == package or module.startswith(package + ".") or not module):
        return
    how = ("set the project up with `bash scripts/setup.sh`, then run the command from the repository's root: "
           f"`.venv/bin/python -m {module or package + '...'}`")
    if sys.version_info[:2] < MIN_PYTHON:
        _exit(f"this is Python {sys.version.split()[0]} ({sys.executable}); the project needs 3.11 or newer", how)
    missing = [name for name in needs if importlib.util.find_spec(name) is None]
    if missing:
        _exit(f"this Python ({sys.executable}) lacks the project's packages ({', '.join(missing)})", how)


def _exit(message: str, hint: str) -> None:
    print(f"error: {message}\n{hint}", file=sys.stderr)
    raise SystemExit(ENVIRONMENT)
