"""Files the user names, measured before a byte is read (workload/user_files.py): a FIFO given as a --config file, a
model directory's config.json or a dataset file, and a sparse tokenizer file or chat template, each refused in one line
naming the flag and the file, exit 2, not read (a FIFO's read waits for a writer forever; a sparse file's holes read
as gigabytes of zeros). Other values than the audit's rows (audit 44g C04, C09, C12, C13, C14)."""
from __future__ import annotations

import contextlib
import os
import signal

import pytest

from tests.unit.test_mistakes_before_ray import JOB, LOCAL, _run, here  # noqa: F401  (here: the fixture)
from workload import cli, user_files
from workload.config_file import read_document


@contextlib.contextmanager
def answers_within(seconds: int):
    """A read that blocks on a FIFO fails the test instead of hanging it."""
    def stuck(signum, frame):
        raise AssertionError(f"no answer within {seconds} s: a file was opened and read without being measured")

    previous = signal.signal(signal.SIGALRM, stuck)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def sparse(path, size: int) -> str:
    with open(path, "wb") as handle:
        handle.truncate(size)  # holes only: nothing stored
    return str(path)


def _one_line(capsys, words: tuple[str, ...]) -> str:
    err = capsys.readouterr().err
    assert all(word in err for word in words) and "Traceback" not in err, err
    at = next(index for index, line in enumerate(err.splitlines()) if line.startswith("error:"))
    assert len(err.splitlines()[at:]) <= 2 and len(err) < 2000, err
    return err


def test_the_rule_refuses_what_is_no_regular_file_or_too_large_or_sparse(tmp_path):
    os.mkfifo(tmp_path / "pipe")
    assert "a FIFO (named pipe), not a regular file" in user_files.problem(tmp_path / "pipe", 100)
    assert "a directory, not a regular file" in user_files.problem(tmp_path, 100)
    assert "a character device" in user_files.problem("/dev/zero", 100)
    (tmp_path / "small.json").write_bytes(b"{}" * 60)
    assert user_files.problem(tmp_path / "small.json", 120) is None
    assert "is 120 bytes; allowed: at most 119" in user_files.problem(tmp_path / "small.json", 119)
    os.symlink(tmp_path / "small.json", tmp_path / "link.json")  # a link to a regular file is read where allowed
    assert user_files.read_bytes(tmp_path / "link.json", 120) == b"{}" * 60
    assert "a symbolic link" in user_files.problem(tmp_path / "link.json", 120, follow_links=False)
    holes = sparse(tmp_path / "holes.json", 3 << 20)
    with pytest.raises(user_files.Refused, match="holes.json is a sparse file: it claims 3,145,728 bytes"):
        user_files.read_bytes(holes, 8 << 20)
    with pytest.raises(user_files.Refused, match="is 3,145,728 bytes; allowed: at most 1,024"):
        user_files.read_bytes(holes, 1024)


def test_a_fifo_as_a_config_file_is_refused_unread(tmp_path, here, capsys):  # noqa: F811
    os.mkfifo(here / "flags.yml")
    with answers_within(20), pytest.raises(cli.UsageError, match=r"--config flags.yml is a FIFO \(named pipe\)"):
        read_document("flags.yml")
    with answers_within(20):
        assert _run(LOCAL, ["--config", "flags.yml"]) == cli.USAGE
    _one_line(capsys, ("--config flags.yml", "FIFO"))
    with answers_within(20):
        assert _run(JOB, ["submit", "--stack", "dev", "--config", "flags.yml"]) == cli.USAGE
    _one_line(capsys, ("--config flags.yml", "FIFO"))


def test_a_model_directorys_fifo_config_and_a_fifo_dataset_are_refused_unread(here, capsys):  # noqa: F811
    from workload.model import config_json

    model = here / "my-model"
    model.mkdir()
    os.mkfifo(model / "config.json")
    (model / "model.safetensors").write_bytes(b"\0" * 64)
    with answers_within(20), pytest.raises(ValueError, match=r"--model_id m: .*config.json is a FIFO"):
        config_json.load_model_config(str(model), "--model_id m")
    with answers_within(20):
        assert _run(LOCAL, ["--model_id", "./my-model"]) == cli.USAGE
    _one_line(capsys, ("--model_id ./my-model", "config.json is a FIFO (named pipe)"))
    os.mkfifo(here / "rows.jsonl")
    with answers_within(20):
        assert _run(LOCAL, ["--dataset", "rows.jsonl"]) == cli.USAGE
    _one_line(capsys, ("--dataset file 'rows.jsonl' is a FIFO (named pipe), not a regular file",))


def test_a_sparse_tokenizer_file_is_refused_by_its_bound_naming_the_flag(here, capsys):  # noqa: F811
    tokenizer = here / "tok"
    tokenizer.mkdir()
    (tokenizer / "tokenizer.json").write_text('{"model": {"vocab": {"a": 0}}, "added_tokens": []}')
    sparse(tokenizer / "tokenizer_config.json", 96 << 20)  # past 64 MiB, nothing stored
    assert _run(LOCAL, ["--tokenizer", "./tok"]) == cli.USAGE
    _one_line(capsys, ("--tokenizer ", "tok: tokenizer_config.json is 100,663,296 bytes; allowed: at most 67,108,864"))
    sparse(tokenizer / "tokenizer_config.json", 4096)  # within the bound, and holes all the same
    assert _run(LOCAL, ["--tokenizer", "./tok"]) == cli.USAGE
    _one_line(capsys, ("--tokenizer ", "tok: tokenizer_config.json is a sparse file"))


def test_a_sparse_chat_template_is_refused_by_its_bound_naming_the_flag(here, capsys):  # noqa: F811
    from workload.data import chat

    chats = '{"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]}\n'
    (here / "talks.jsonl").write_text(chats * 40)
    sparse(here / "huge.jinja", 5 << 20)
    assert _run(LOCAL, ["--dataset", "talks.jsonl", "--data_format", "chat", "--chat_template", "huge.jinja"]) \
        == cli.USAGE
    _one_line(capsys, ("--chat_template ", "huge.jinja is 5,242,880 bytes; allowed: at most 1,048,576"))
    sparse(here / "holes.jinja", 8192)
    with pytest.raises(ValueError, match="--chat_template holes.jinja is a sparse file"):
        chat.template_text("holes.jinja")
    (here / "crlf.jinja").write_bytes(b"{{ messages }}\r\n{% if x %}y{% endif %}\r\n")
    assert chat.template_text("crlf.jinja") == "{{ messages }}\n{% if x %}y{% endif %}\n"  # as text mode read it


def test_a_link_into_the_kernels_files_is_refused_unread(tmp_path):
    """/proc/self/environ says "regular file" of size 0 to stat and holds the process's environment (its tokens):
    a user file reached through a link into /proc or /sys is refused by the one rule every reader uses."""
    (tmp_path / "template.jinja").symlink_to("/proc/self/environ")
    (tmp_path / "config.yaml").symlink_to("/sys/kernel/hostname" if os.path.exists("/sys/kernel/hostname") else "/proc/version")
    for name in ("template.jinja", "config.yaml"):
        why = user_files.problem(tmp_path / name, 1 << 20)
        assert why is not None and why.startswith("is a file of the kernel's /"), why
        with pytest.raises(user_files.Refused):
            user_files.read_bytes(tmp_path / name, 1 << 20)
    (tmp_path / "mine.jinja").write_text("{{ messages }}")
    assert user_files.problem(tmp_path / "mine.jinja", 1 << 20) is None
