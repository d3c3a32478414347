"""scripts/setup.sh against a fake package index, as a fresh machine sees PyPI and PyTorch's CPU index: the CPU build
of torch is chosen when the CPU index offers it; an unreachable CPU index falls back to the default index at once;
a .venv made by another Python is rebuilt; a Python older than 3.11 is refused in one line.

The fake index is a PEP 503 "simple" index (https://peps.python.org/pep-0503/) served over HTTP from a temporary
directory, with tiny wheels named as PyTorch names its own: `torch-2.13.0+cpu-...whl` on the CPU index (as
https://download.pytorch.org/whl/cpu/torch/ lists them, the `+` written `%2B` in the links), and a plain
`torch-2.13.0` on the default index that requires an `nvidia-*` package, as PyPI's Linux wheel does.
"""
from __future__ import annotations

import base64
import functools
import hashlib
import http.server
import os
import shutil
import socket
import subprocess
import sys
import threading
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def wheel(directory: Path, name: str, version: str, requires: tuple[str, ...] = ()) -> str:
    """A minimal valid wheel (one module, METADATA, WHEEL, RECORD with hashes); returns its file name."""
    filename = f"{name.replace('-', '_')}-{version}-py3-none-any.whl"
    dist_info = f"{name.replace('-', '_')}-{version}.dist-info"
    files = {
        f"{name.replace('-', '_')}/__init__.py": f"__version__ = {version!r}\n",
        f"{dist_info}/METADATA": "Metadata-Version: 2.1\n"
                                 f"Name: {name}\nVersion: {version}\n"
                                 + "".join(f"Requires-Dist: {r}\n" for r in requires),
        f"{dist_info}/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = []
    with zipfile.ZipFile(directory / filename, "w") as archive:
        for path, text in files.items():
            archive.writestr(path, text)
            digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=").decode()
            record.append(f"{path},sha256={digest},{len(text.encode())}")
        archive.writestr(f"{dist_info}/RECORD", "\n".join(record + [f"{dist_info}/RECORD,,"]) + "\n")
    return filename


def simple_index(root: Path, packages: dict[str, list[str]]) -> None:
    """`root/<project>/index.html` linking each wheel, which lies beside it."""
    for project, wheels in packages.items():
        page = root / project
        page.mkdir(parents=True)
        links = "".join(f'<a href="{w.replace("+", "%2B")}">{w}</a>\n' for w in wheels)
        (page / "index.html").write_text(f"<!DOCTYPE html><html><body>\n{links}</body></html>\n")


@pytest.fixture(scope="module")
def index(tmp_path_factory):
    """http://127.0.0.1:PORT/pypi/simple (the default index) and .../cpu (PyTorch's CPU index)."""
    root = tmp_path_factory.mktemp("index")
    build = root / "build"
    build.mkdir()
    cpu = wheel(build, "torch", "2.13.0+cpu")
    cuda = wheel(build, "torch", "2.13.0", requires=("nvidia-cublas-cu13",))
    nvidia = wheel(build, "nvidia-cublas-cu13", "13.0.0")
    simple_index(root / "pypi" / "simple", {"torch": [cuda], "nvidia-cublas-cu13": [nvidia]})
    simple_index(root / "cpu", {"torch": [cpu]})
    for project, name in (("pypi/simple/torch", cuda), ("pypi/simple/nvidia-cublas-cu13", nvidia), ("cpu/torch", cpu)):
        shutil.copy(build / name, root / project / name)
    handler = functools.partial(_QuietHandler, directory=str(root))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args) -> None:
        pass


def closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def setup_env(tmp_path: Path, default_index: str, cpu_index: str, python: str = sys.executable) -> dict[str, str]:
    """pip sees only the fake indexes: no config file (PIP_CONFIG_FILE=os.devnull loads none, pip's
    configuration docs), no find-links, its own cache."""
    env = {key: value for key, value in os.environ.items() if not key.startswith(("PIP_", "VIRTUAL_ENV"))}
    return {**env, "PIP_CONFIG_FILE": os.devnull, "PIP_INDEX_URL": default_index, "PIP_CACHE_DIR": str(tmp_path / "c"),
            "PIP_DISABLE_PIP_VERSION_CHECK": "1", "TORCH_CPU_INDEX": cpu_index, "PYTHON": python}


@pytest.fixture
def project(tmp_path) -> Path:
    """A project with the real scripts and an empty requirements.txt: the torch step is what is under test."""
    project = tmp_path / "project"
    shutil.copytree(REPO / "scripts", project / "scripts")
    (project / "requirements.txt").write_text("# nothing beyond torch here\n")
    return project


def test_a_fresh_setup_takes_the_cpu_build_and_rebuilds_a_venv_of_another_python(project, tmp_path, index):
    # What a failed attempt with an older Python leaves: a .venv whose python is 3.9.
    (project / ".venv" / "bin").mkdir(parents=True)
    (project / ".venv" / "bin" / "python").write_text("#!/bin/sh\necho 3.9\n")
    (project / ".venv" / "bin" / "python").chmod(0o755)
    done = subprocess.run(["bash", "scripts/setup.sh"], cwd=project, capture_output=True, text=True, timeout=300,
                          env=setup_env(tmp_path, f"{index}/pypi/simple", f"{index}/cpu"))
    assert done.returncode == 0, done.stdout + done.stderr
    said = done.stdout + done.stderr
    version = "%d.%d" % sys.version_info[:2]
    assert f"setup: .venv was made by Python 3.9; rebuilding it with {version}" in said, said
    assert f"setup: torch 2.13.0: the CPU build, from {index}/cpu" in said, said
    assert "setup: torch 2.13.0+cpu (CPU build), 0 MB in .venv" in said, said
    listed = subprocess.run([str(project / ".venv/bin/python"), "-m", "pip", "list", "--format=freeze"],
                            capture_output=True, text=True, env=setup_env(tmp_path, "", "")).stdout
    assert "torch==2.13.0+cpu" in listed and "nvidia" not in listed, f"the CPU build and nothing of CUDA:\n{listed}"
    # From any directory, .venv's python finds the project, as after `pip install -e .`.
    found = subprocess.run([str(project / ".venv/bin/python"), "-c", "import scripts.torch_build as m; print(m.__file__)"],
                           cwd="/", capture_output=True, text=True,
                           env={name: value for name, value in os.environ.items() if name != "PYTHONPATH"})
    assert found.stdout.strip() == str(project / "scripts" / "torch_build.py"), found.stderr


def test_an_unreachable_cpu_index_falls_back_to_the_default_index(tmp_path, index):
    done = subprocess.run([sys.executable, str(REPO / "scripts/torch_build.py"), "source", "2.13.0"],
                          capture_output=True, text=True, timeout=60,
                          env=setup_env(tmp_path, "", f"http://127.0.0.1:{closed_port()}/cpu"))
    assert done.returncode == 0 and done.stdout == "", f"no extra index when it cannot be reached: {done.stdout!r}"
    assert "cannot be reached" in done.stderr and "taking the default index's build" in done.stderr, done.stderr
    # And an index that answers without a +cpu build of the version is not taken either.
    done = subprocess.run([sys.executable, str(REPO / "scripts/torch_build.py"), "source", "2.99.0"],
                          capture_output=True, text=True, timeout=60, env=setup_env(tmp_path, "", f"{index}/cpu"))
    assert done.stdout == "", f"the CPU index has no 2.99.0+cpu: {done.stdout!r}"


def test_a_python_older_than_3_11_is_refused_in_one_line(project, tmp_path):
    old = tmp_path / "python3.9"
    # Answers as Python 3.9 does: the version check's sys.exit(True), the version print 3.9.
    old.write_text('#!/bin/sh\ncase "$2" in *exit*) exit 1;; *) echo 3.9;; esac\n')
    old.chmod(0o755)
    done = subprocess.run(["bash", "scripts/setup.sh"], cwd=project, capture_output=True, text=True, timeout=60,
                          env=setup_env(tmp_path, "", "", python=str(old)))
    assert done.returncode == 3, done.stderr
    assert done.stderr.startswith(f"error: PYTHON={old} is Python 3.9; the project needs 3.11 or newer\n"), done.stderr
    assert len(done.stderr.splitlines()) == 2 and not (project / ".venv").exists(), done.stderr
