"""What the commands write (workload/output_paths.py, the one rule): an existing path that is not what they write (a
socket, a device, a FIFO, a file for a directory) refused unopened, a name past NAME_MAX bytes or a path past PATH_MAX
refused naming the flag, for tools.loss_curve's and tools.gpu_panel's --out, workload.export's OUT and tools.capacity's
--write-stack; before the inputs are read and before torch, transformers or Ray are imported."""
from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from workload import cli
from workload.output_paths import NAME_MAX, PATH_MAX, check_output, length_problem, output_problem

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def unix_socket(tmp_path):
    server = socket.socket(socket.AF_UNIX)
    path = tmp_path / "listening.svg"
    server.bind(str(path))
    yield path
    server.close()


def test_what_is_not_a_regular_file_is_refused_and_what_may_be_written_is_not(tmp_path, unix_socket):
    os.mkfifo(tmp_path / "pipe")
    (tmp_path / "kept.svg").write_text("old picture")
    os.symlink(tmp_path / "kept.svg", tmp_path / "link.svg")
    assert "a socket, not a regular file (refused unopened)" in output_problem(str(unix_socket))
    assert "a FIFO (named pipe), not a directory" in output_problem(str(tmp_path / "pipe"), directory=True)
    assert "a character device, not a regular file" in output_problem(os.devnull)
    assert "a directory, not a regular file" in output_problem(str(tmp_path))
    assert "is a file, not a directory" in output_problem(str(tmp_path / "kept.svg"), directory=True)
    assert "kept.svg, which is a file, not a directory" in output_problem(str(tmp_path / "kept.svg" / "inner"))
    assert "a symbolic link (to another file)" in output_problem(str(tmp_path / "link.svg"))
    for allowed, directory in ((tmp_path / "new.svg", False), (tmp_path / "kept.svg", False),
                               (tmp_path / "new-model", True), (tmp_path, True)):
        assert output_problem(str(allowed), directory) is None, allowed


def test_a_name_is_measured_in_bytes_and_the_path_as_a_whole():
    assert length_problem("/tmp/" + "a" * NAME_MAX) is None
    # 128 two-byte letters: 128 characters, 256 bytes, one past what the kernel takes (ENAMETOOLONG).
    assert "a name of 256 bytes; allowed: at most 255 bytes a name (NAME_MAX)" in length_problem("/tmp/" + "ü" * 128)
    deep = "/tmp/" + "/".join(["d" * 200] * 21)  # every name short, the whole past 4,095 bytes
    assert f"allowed: at most {PATH_MAX - 1:,} (PATH_MAX)" in length_problem(deep)
    assert "NUL" in length_problem("model\x00.svg")


def test_the_refusal_names_the_flag_and_never_repeats_a_long_path(tmp_path):
    long_name = str(tmp_path / ("w" * 260))
    with pytest.raises(ValueError) as refused:
        check_output("--out", long_name)
    assert str(refused.value).startswith("--out: the path has a name of 260 bytes") and "w" * 30 not in str(
        refused.value), refused.value


@pytest.mark.parametrize("module, argv, flag", [
    ("tools.loss_curve", ["{run}", "--out", "{socket}"], "--out"),
    ("tools.gpu_panel", ["{recording}", "--out", os.devnull + ".svg"], None),  # no such file: allowed, then the input
    ("tools.gpu_panel", ["{recording}", "--out", "{long}.svg"], "--out"),
    ("workload.checkpoint.export", ["{run}/checkpoint_000004", "{socket}"], "OUT"),
    ("workload.checkpoint.export", ["{run}/checkpoint_000004", "{tmp}/" + "é" * 130], "OUT"),
])
def test_every_command_refuses_its_output_before_its_input(module, argv, flag, tmp_path, unix_socket, capsys):
    import importlib

    (tmp_path / "run" / "checkpoint_000004").mkdir(parents=True)
    values = {"run": str(tmp_path / "run"), "socket": str(unix_socket), "recording": str(tmp_path / "absent.json"),
              "long": str(tmp_path / ("q" * 300)), "tmp": str(tmp_path)}
    code = cli.run(importlib.import_module(module).main, [word.format(**values) for word in argv])
    err = capsys.readouterr().err.splitlines()
    if flag is None:  # /dev/null.svg does not exist: the output passes, and the missing input is what is said
        assert "--out" not in err[0], err
        return
    assert code == cli.USAGE and err[0].startswith(f"error: {flag}") and len(err) <= 2, err
    assert "refused unopened" in err[0] or "NAME_MAX" in err[0], err


def test_write_stack_past_path_max_is_refused_naming_the_flag(tmp_path):
    from tools.capacity.stack_file import load_stack

    deep = tmp_path.joinpath(*["p" * 250] * 17)
    with pytest.raises(ValueError, match=r"^--write-stack: the path is [\d,]+ bytes as an absolute path"):
        load_stack(deep, "dev", "--write-stack")


def test_a_fifo_put_at_out_after_the_check_is_not_waited_on(tmp_path):
    """svg_chart.write opens without waiting (O_NONBLOCK): a FIFO with no reader fails at once (ENXIO)."""
    from tools.svg_chart import write

    os.mkfifo(tmp_path / "late.svg")
    with pytest.raises(cli.UsageError, match="cannot be written"):
        write(str(tmp_path / "late.svg"), "<svg/>")
    write(str(tmp_path / "fine.svg"), "<svg/>")
    assert (tmp_path / "fine.svg").read_text() == "<svg/>"


@pytest.mark.parametrize("module, argv, flag", [
    ("tools.loss_curve", ["{run}", "--out", "{link}.svg"], "--out"),
    ("tools.gpu_panel", ["{recording}", "--out", "{link}.svg"], "--out"),
    ("workload.checkpoint.export", ["{run}/checkpoint_000004", "{link}"], "OUT"),
])
@pytest.mark.parametrize("target", ["their_file.txt", "their_directory", "not_there_yet"])
def test_a_link_at_a_commands_output_is_refused_and_its_target_untouched(module, argv, flag, target, tmp_path, capsys):
    """A link to someone's file, to a directory, or to nothing: never written through, whatever the command."""
    import importlib

    (tmp_path / "run" / "checkpoint_000004").mkdir(parents=True)
    (tmp_path / "their_file.txt").write_text("their notes")
    (tmp_path / "their_directory").mkdir()
    link = tmp_path / "shared_name"
    for name in ("shared_name", "shared_name.svg"):
        os.symlink(tmp_path / target, tmp_path / name)
    values = {"run": str(tmp_path / "run"), "recording": str(tmp_path / "absent.json"), "link": str(link)}
    code = cli.run(importlib.import_module(module).main, [word.format(**values) for word in argv])
    err = capsys.readouterr().err.splitlines()
    assert code == cli.USAGE and err[0].startswith(f"error: {flag}") and "symbolic link" in err[0], err
    assert len(err) <= 2, err
    assert (tmp_path / "their_file.txt").read_text() == "their notes" and not (tmp_path / "not_there_yet").exists()
    assert os.listdir(tmp_path / "their_directory") == []


def test_write_stack_through_a_link_is_refused_and_a_late_link_not_followed(tmp_path):
    from tools.capacity.stack_file import load_stack, write_stack_file
    from tools.svg_chart import write

    (tmp_path / "Pulumi.yaml").write_text("name: raytrain\nconfig: {}\n")
    (tmp_path / "elsewhere.yaml").write_text("config: {}\n")
    os.symlink(tmp_path / "elsewhere.yaml", tmp_path / "Pulumi.east.yaml")
    with pytest.raises(ValueError, match=r"^--write-stack east: its stack file is a symbolic link"):
        load_stack(tmp_path, "east", "--write-stack")
    with pytest.raises(OSError):  # a link put there after the check: O_NOFOLLOW answers ELOOP
        write_stack_file(tmp_path / "Pulumi.east.yaml", "raytrain", "us-west-2", "us-west-2a", None)
    os.symlink(tmp_path / "elsewhere.yaml", tmp_path / "late.svg")
    with pytest.raises(cli.UsageError, match="cannot be written"):
        write(str(tmp_path / "late.svg"), "<svg/>")
    assert (tmp_path / "elsewhere.yaml").read_text() == "config: {}\n"


def test_the_refusal_comes_before_any_heavy_import_in_a_fresh_process(tmp_path):
    os.mkfifo(tmp_path / "model")
    code = ("import sys; from workload import cli; from workload.checkpoint import export; "
            f"code = cli.run(export.main, [{str(tmp_path / 'ckpt')!r}, {str(tmp_path / 'model')!r}]); "
            "print(code, sorted(m for m in ('torch', 'transformers', 'ray') if m in sys.modules))")
    (tmp_path / "ckpt").mkdir()
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PYTHONPATH": str(REPO)})
    assert done.stdout.split("\n")[0] == "2 []", (done.stdout, done.stderr)
    assert "OUT" in done.stderr and "FIFO" in done.stderr, done.stderr
