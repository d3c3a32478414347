"""`python -m workload.export` told what it was given when it is not a checkpoint (the run directory above one, a
run with exported models only), before any heavy import; and the libraries' import-time noise (torchao's "Failed to
load ... .so" on a CPU machine, FutureWarnings, transformers' notices) kept out of its output."""
from __future__ import annotations

import logging
import os
import subprocess
import sys
import warnings

import pytest

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


@pytest.mark.parametrize("marker", ["train_step.json", ".metadata"])
def test_the_two_arguments_swapped_are_named_in_their_order(tmp_path, capsys, marker):
    """`workload.export OUT CHECKPOINT`: the checkpoint (its step record, or DCP's .metadata) given second is said to
    go first, with the command in that order; nothing is written and the checkpoint is untouched."""
    checkpoint = tmp_path / "runs" / "r1" / "checkpoint_000010"
    checkpoint.mkdir(parents=True)
    (checkpoint / marker).write_text("{}")
    assert cli.run(export.main, [str(tmp_path / "model"), str(checkpoint)]) == cli.USAGE
    err = capsys.readouterr().err
    assert f"the checkpoint comes first, `python -m workload.export {checkpoint} {tmp_path / 'model'}`" in err, err
    assert sorted(os.listdir(checkpoint)) == [marker] and not (tmp_path / "model").exists()


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


# Each case: a checkpoint directory's file made what a crafted checkpoint may make it; the refusal names the file.
_CRAFTED_FILES = """
import json, os, sys
from workload import cli
from workload.checkpoint import export
root = sys.argv[1]
def checkpoint(name, make):
    directory = os.path.join(root, name)
    os.makedirs(directory)
    for file, text in ((".metadata", "m"), ("config.json", "{}"), ("__0_0.distcp", "x" * 64)):
        with open(os.path.join(directory, file), "w") as handle:
            handle.write(text)
    return make(directory) or directory
def sparse(name, size):
    def make(directory):
        with open(os.path.join(directory, name), "wb") as handle:
            handle.truncate(size)
    return make
def replaced(name, how):
    def make(directory):
        os.remove(os.path.join(directory, name))
        how(os.path.join(directory, name))
    return make
outside = os.path.join(root, "elsewhere.json")
open(outside, "w").write("{}")
cases = {
    "shards all holes": (sparse("__0_0.distcp", 3 << 30), "its file __0_0.distcp is a sparse file"),
    "a sparse config.json": (sparse("config.json", 5 << 30), "its file config.json is 5,368,709,120 bytes; allowed: at most 1,048,576"),
    "a huge .metadata": (sparse(".metadata", 300 << 20), "its file .metadata is 314,572,800 bytes; allowed: at most 268,435,456"),
    "a sparse .metadata": (sparse(".metadata", 7 << 20), "its file .metadata is a sparse file"),
    "a FIFO .metadata": (replaced(".metadata", os.mkfifo), "its file .metadata is a FIFO (named pipe), not a regular file"),
    "a device's link": (replaced(".metadata", lambda path: os.symlink("/dev/zero", path)),
                        "its file .metadata is a symbolic link, not a regular file"),
    "a record's link": (replaced("config.json", lambda path: os.symlink(outside, path)),
                        "its file config.json is a symbolic link, not a regular file"),
}
results = {}
for name, (make, words) in cases.items():
    directory = checkpoint(name.replace(" ", "_").replace("'", ""), make)
    import contextlib, io
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        code = cli.run(export.main, [directory, os.path.join(root, "out_" + str(len(results)))])
    results[name] = [code, err.getvalue().strip().splitlines(), words, directory]
heavy = sorted(module for module in ("torch", "transformers", "safetensors", "peft") if module in sys.modules)
print(json.dumps({"results": results, "heavy": heavy}))
"""


def _in_a_fresh_interpreter(script: str, tmp_path) -> dict:
    """The JSON report `script` prints, run with tmp_path in a new Python from the checkout (as the command runs)."""
    import json

    done = subprocess.run([sys.executable, "-c", script, str(tmp_path)], capture_output=True, text=True,
                          timeout=120, cwd=os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_a_checkpoints_files_are_measured_before_torch_is_imported(tmp_path):
    # A fresh interpreter, as `python -m workload.export` is: each refusal comes before torch or transformers load
    # (seconds of imports), which sys.modules shows, and names CHECKPOINT's file.
    report = _in_a_fresh_interpreter(_CRAFTED_FILES, tmp_path)
    for name, (code, lines, words, directory) in report["results"].items():
        assert code == cli.USAGE and len(lines) == 1, f"{name}: exit 2 and one line; got {code}: {lines}"
        assert lines[0].startswith(f"error: CHECKPOINT {directory}: ") and words in lines[0], \
            f"{name}: the refusal should name CHECKPOINT and say {words!r}: {lines[0]}"
    assert report["heavy"] == [], f"refused only after importing {report['heavy']}"
    assert not any(name.startswith("out_") for name in os.listdir(tmp_path)), "nothing is written"


def test_the_files_are_read_only_as_regular_files_within_their_bound(tmp_path):
    from workload.checkpoint import file_checks

    assert "character device" in file_checks.file_problem("/dev/null", 10)
    os.mkfifo(tmp_path / "fifo")  # a read would wait for a writer forever
    for path, words in ((tmp_path / "fifo", "FIFO"), (tmp_path / "missing", None)):
        try:
            file_checks.read_regular(str(path), 10)
        except file_checks.CheckpointRefused as refused:
            assert words and words in str(refused) and str(path) in str(refused), refused
        except FileNotFoundError:
            assert words is None
    (tmp_path / "eleven").write_bytes(b"x" * 11)
    try:
        file_checks.read_regular(str(tmp_path / "eleven"), 10)
        raise AssertionError("an 11-byte file read under a 10-byte bound")
    except file_checks.CheckpointRefused as refused:
        assert "11 bytes; allowed: at most 10" in str(refused), refused
    assert file_checks.read_regular(str(tmp_path / "eleven"), 11) == b"x" * 11


def test_the_arguments_are_bounded_and_never_echoed(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    long = "/tmp/" + "c" * 70_000
    cases = [([long, "model"], "error: CHECKPOINT: must be at most 4,096 characters, got 70,005 (its value is not "
                               "shown)"),
             ([str(tmp_path), "o" * 5_000], "error: OUT: must be at most 4,096 characters, got 5,000 (its value is "
                                           "not shown)"),
             (["s3://bkt/ckpt?X-Amz-Signature=f00dfeed", "model"], "error: CHECKPOINT: must hold no user:password@")]
    for words, first in cases:
        assert cli.run(export.main, words) == cli.USAGE, words[:1]
        err = capsys.readouterr().err
        assert err.startswith(first) and len(err) < 1000 and "f00dfeed" not in err, err[:300]


def test_out_as_a_uri_is_refused_and_nothing_is_created(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "checkpoint_000007").mkdir()
    first = {}
    for out in ("gs://team-models/run7/final", "S3://archive/llm", "https://user:hunter22@store.example/m"):
        assert cli.run(export.main, [str(tmp_path / "checkpoint_000007"), out]) == cli.USAGE, out
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith("error: OUT"), err
        assert "hunter22" not in err[0], err
        first[out] = err[0]
    assert first["gs://team-models/run7/final"].startswith(
        "error: OUT 'gs://team-models/run7/final' is a URI; OUT is a directory on this machine"), first
    assert "aws s3 cp --recursive OUT" in first["S3://archive/llm"], first
    assert sorted(os.listdir(tmp_path)) == ["checkpoint_000007"], "no local folder named after the scheme"


def test_an_out_this_user_cannot_create_is_refused_before_the_checkpoint_is_read(tmp_path, capsys, monkeypatch):
    """OUT under a file, or blank: one line naming OUT, exit 2, before the imports (it was os.makedirs' traceback
    after the whole load)."""
    monkeypatch.setattr(export, "quiet_imports", lambda: (_ for _ in ()).throw(AssertionError("imported first")))
    (tmp_path / "checkpoint_000003").mkdir()
    (tmp_path / "notes.txt").write_text("not a directory")
    for out, said in ((str(tmp_path / "notes.txt" / "model"), "is a file, not a directory"),
                      ("  ", "OUT is empty; give the directory to write the model to")):
        assert cli.run(export.main, [str(tmp_path / "checkpoint_000003"), out]) == cli.USAGE, out
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith("error: OUT") and said in err[0], err


def test_merge_of_a_whole_model_is_refused_before_the_imports(tmp_path, capsys, monkeypatch):
    """--merge on a --method full checkpoint (no adapter_config.json) is a file's absence: said before the seconds of
    torch's and transformers' imports, not after them."""
    monkeypatch.setattr(export, "quiet_imports", lambda: (_ for _ in ()).throw(AssertionError("imported first")))
    checkpoint = tmp_path / "run" / "checkpoint_000011"
    checkpoint.mkdir(parents=True)
    (checkpoint / "config.json").write_text('{"model_type": "llama"}')
    (checkpoint / ".metadata").write_bytes(b"")
    assert cli.run(export.main, [str(checkpoint), str(tmp_path / "merged"), "--merge"]) == cli.USAGE
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"error: --merge: CHECKPOINT {checkpoint} holds a whole model (--method full), not adapters; "
                   "export it without --merge"], err


def test_a_shard_the_metadata_lists_and_the_copy_lacks_is_named_before_the_imports(tmp_path, capsys, monkeypatch):
    """A checkpoint copied short (rank 3's shard not there): named from .metadata's bytes before torch's imports,
    not after them and the unpickling (it took seconds; reader.check_storage says it again after)."""
    monkeypatch.setattr(export, "quiet_imports", lambda: (_ for _ in ()).throw(AssertionError("imported first")))
    checkpoint = tmp_path / "checkpoint_000030"
    checkpoint.mkdir()
    (checkpoint / "config.json").write_text('{"model_type": "llama"}')
    (checkpoint / ".metadata").write_bytes(b"\x80\x04\x95 X\x0c\x00\x00\x00__0_0.distcpX\x0c\x00\x00\x00__3_0.distcp"
                                           b"X\x0c\x00\x00\x00__5_0.distcp.")
    (checkpoint / "__0_0.distcp").write_bytes(b"\x00" * 64)
    assert cli.run(export.main, [str(checkpoint), str(tmp_path / "model")]) == cli.USAGE
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"error: CHECKPOINT {checkpoint}: __3_0.distcp and 1 more, which its .metadata lists, is missing "
                   "(an incomplete copy?)"], err
    assert not (tmp_path / "model").exists()


_CRAFTED_VALUES = r"""
import contextlib, io, json, os, sys
from workload import cli
from workload.checkpoint import export
root = sys.argv[1]
cases = {"a model_type that climbs": {"model_type": "../../../var/tmp/payload"},
         "a model_type with a slash": {"model_type": "qwen2/../llama"},
         "a model_type that is a number": {"model_type": 2},
         "a negative hidden size": {"model_type": "llama", "hidden_size": -64}}
results = {}
for number, (name, config) in enumerate(cases.items()):
    directory = os.path.join(root, f"checkpoint_{number}")
    os.makedirs(directory)
    for file, text in ((".metadata", "m"), ("config.json", json.dumps(config)), ("__0_0.distcp", "x" * 64)):
        with open(os.path.join(directory, file), "w") as handle:
            handle.write(text)
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        code = cli.run(export.main, [directory, os.path.join(root, f"out_{number}")])
    results[name] = [code, err.getvalue().strip().splitlines()]
heavy = sorted(module for module in ("torch", "transformers", "safetensors", "peft") if module in sys.modules)
print(json.dumps({"results": results, "heavy": heavy}))
"""


def test_a_checkpoints_config_values_are_checked_before_torch_is_imported(tmp_path):
    # config.json's model_type a plain identifier and its sizes in bounds, said before the seconds of torch's and
    # transformers' imports (audit 44g C22: refused, but after 3.9 s); which model_types transformers builds is
    # checked after them (read_config_file).
    report = _in_a_fresh_interpreter(_CRAFTED_VALUES, tmp_path)
    for name, (code, lines) in report["results"].items():
        assert code == cli.USAGE and len(lines) == 1, f"{name}: exit 2 and one line; got {code}: {lines}"
        words = "hidden_size is -64; allowed: an integer from 1" if "hidden" in name else \
            "model_type"
        assert "config.json" in lines[0] and words in lines[0], f"{name}: {lines[0]}"
    assert "is not a causal language model" in report["results"]["a model_type with a slash"][1][0]
    assert report["heavy"] == [], f"refused only after importing {report['heavy']}"
