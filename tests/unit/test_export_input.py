"""`python -m workload.export` told what it was given when it is not a checkpoint (the run directory above one, a
run with exported models only), before any heavy import; and the libraries' import-time noise (torchao's "Failed to
load ... .so" on a CPU machine, FutureWarnings, transformers' notices) kept out of its output."""
from __future__ import annotations

import logging
import os
import subprocess
import sys
import warnings

from workload import cli
from workload.checkpoint import export


def test_the_run_directory_is_named_as_such_with_its_latest_checkpoint(tmp_path, capsys):
    run = tmp_path / "runs" / "local-1"
    for step in ("checkpoint_000002", "checkpoint_000004", "model_000004"):
        (run / step).mkdir(parents=True)
    code = cli.run(export.main, [str(run), str(tmp_path / "model")])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == cli.USAGE and len(err) == 1, err
    assert err[0] == (f"error: CHECKPOINT {run} is a run directory, not a checkpoint; give one of its 2 "
                      f"checkpoint_<step>/ directories, the latest: {run}/checkpoint_000004"), err
    assert "version" not in err[0]


def test_a_run_with_exported_models_only_and_a_stray_directory(tmp_path, capsys):
    run = tmp_path / "run"
    (run / "model_000004").mkdir(parents=True)
    assert cli.run(export.main, [str(run), str(tmp_path / "model")]) == cli.USAGE
    assert "its model_<step>/ directories are exported already" in capsys.readouterr().err
    (tmp_path / "other").mkdir()
    assert cli.run(export.main, [str(tmp_path / "other"), str(tmp_path / "model2")]) == cli.USAGE
    err = capsys.readouterr().err.splitlines()
    assert err == [f"error: CHECKPOINT {tmp_path / 'other'} holds no checkpoint (no checkpoint_<step>/ directory, no "
                   ".metadata): a run that stopped before its first save (every --checkpoint_every steps) leaves none",
                   "give a run's checkpoint_<step>/ directory: python -m workload.export "
                   "STORAGE_PATH/RUN_NAME/checkpoint_<step> OUT"], err
    assert "version" not in err[0]
    (tmp_path / "other" / "local_run_flags.json").write_text('{"checkpoint_every": 0}')
    assert cli.run(export.main, [str(tmp_path / "other"), str(tmp_path / "model2")]) == cli.USAGE
    assert "its run saved none (--checkpoint_every 0)" in capsys.readouterr().err
    (tmp_path / "old").mkdir()
    (tmp_path / "old" / ".metadata").write_bytes(b"")  # shards without the config.json the job writes beside them
    assert cli.run(export.main, [str(tmp_path / "old"), str(tmp_path / "model3")]) == cli.USAGE
    assert "no config.json beside its shards" in capsys.readouterr().err


def test_the_noise_filter_is_installed_before_the_heavy_imports(monkeypatch):
    monkeypatch.setattr(warnings, "filters", list(warnings.filters))
    levels = {name: logging.getLogger(name).level for name in export.QUIET_LOGGERS}
    try:
        export.quiet_imports()
        for module in export.WARNING_MODULES:
            assert any(action == "ignore" and pattern is not None and pattern.match(module + ".sub")
                       for action, _, _, pattern, _ in warnings.filters), module
        assert all(logging.getLogger(name).level == logging.ERROR for name in export.QUIET_LOGGERS)
    finally:
        for name, level in levels.items():
            logging.getLogger(name).setLevel(level)


def test_importing_the_libraries_after_the_filter_prints_nothing(tmp_path):
    # A fresh interpreter, as `python -m workload.export` is: what torch, torchao, transformers and PEFT print at
    # import reaches stderr only if the filter let it through.
    code = ("from workload.checkpoint.export import quiet_imports; quiet_imports(); "
            "import torch, transformers, peft; from transformers import AutoModelForCausalLM")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                          cwd=os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
                          env={**os.environ, "PYTHONWARNINGS": ""})
    assert done.returncode == 0, done.stderr
    assert done.stdout == "" and done.stderr == "", done.stderr
