"""A compressed NCCL log (workload/fabric/transport.py, the one rule for what LOGFILE holds): a gzip stream is
decompressed by its first bytes, whatever its name, and judged as the text it holds, within the same bound on text;
one that inflates past the bound, or is cut short, and a log in another compression are refused naming LOGFILE -
never "no NCCL transport lines" about a log that has them."""
from __future__ import annotations

import bz2
import gzip
import json
import lzma

import pytest

from tests.support.fake_nccl_logs import nccl_job
from workload import cli
from workload.fabric import transport


def job_log(ranks) -> str:
    return "".join(f"{line}\n" for rank in ranks for line in rank.lines)


@pytest.mark.parametrize("name", ["rank3.txt.gz", "worker.log", "nccl_debug.0"])
def test_a_gzip_log_is_judged_as_the_text_it_holds_whatever_its_name(name, tmp_path, capsys):
    text = job_log(nccl_job(nodes=2, gpus_per_node=2))
    (tmp_path / "plain.log").write_text(text)
    # two gzip members, as `cat a.gz b.gz` or a log shipper's appended chunks make: both are read (RFC 1952 2.2)
    half = len(text) // 2
    (tmp_path / name).write_bytes(gzip.compress(text[:half].encode()) + gzip.compress(text[half:].encode()))
    assert cli.run(transport.main, [str(tmp_path / "plain.log"), "--expect", "efa"]) == cli.OK
    plain = json.loads(capsys.readouterr().out)
    assert cli.run(transport.main, [str(tmp_path / name), "--expect", "efa"]) == cli.OK
    assert json.loads(capsys.readouterr().out) == plain


@pytest.mark.parametrize("compress, said", [(bz2.compress, "bzip2-compressed"), (lzma.compress, "xz-compressed"),
                                            (lambda data: b"\x28\xb5\x2f\xfd" + data, "zstd-compressed")])
def test_another_compression_is_refused_naming_logfile(compress, said, tmp_path, capsys):
    (tmp_path / "job.log").write_bytes(compress(job_log(nccl_job()).encode()))
    assert cli.run(transport.main, [str(tmp_path / "job.log")]) == cli.USAGE
    err = capsys.readouterr().err.splitlines()
    assert len(err) <= 2 and err[0].startswith(f"error: LOGFILE {tmp_path / 'job.log'} is {said}"), err


def test_a_gzip_that_inflates_past_the_bound_or_is_cut_short_is_refused(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(transport, "MAX_LOG_BYTES", 64 * 1024)
    (tmp_path / "bomb.gz").write_bytes(gzip.compress(b"\n" * (1 << 20)))  # 1 MiB of newlines: about 1 KiB on disk
    assert (tmp_path / "bomb.gz").stat().st_size < transport.MAX_LOG_BYTES
    assert cli.run(transport.main, [str(tmp_path / "bomb.gz")]) == cli.USAGE
    assert "decompresses to more than 65,536 bytes" in capsys.readouterr().err
    whole = gzip.compress(job_log(nccl_job()).encode())
    (tmp_path / "cut.gz").write_bytes(whole[: len(whole) // 2])
    assert cli.run(transport.main, [str(tmp_path / "cut.gz")]) == cli.USAGE
    err = capsys.readouterr().err
    assert "cut.gz starts as gzip but cannot be decompressed" in err and "no NCCL transport lines" not in err, err


@pytest.mark.parametrize("encoding", ["utf-16", "utf-16-be"])
def test_a_utf16_log_is_judged_as_the_text_it_holds(encoding, tmp_path, capsys):
    """A log saved as UTF-16 with its byte order mark (Windows PowerShell 5's `>`) holds the same lines: the same
    verdict as the UTF-8 file, not "no NCCL transport lines"; one that only starts like UTF-16 is refused."""
    text = job_log(nccl_job(nodes=2, gpus_per_node=2))
    (tmp_path / "plain.log").write_text(text)
    data = text.encode(encoding)
    (tmp_path / "wide.log").write_bytes(data if encoding == "utf-16" else b"\xfe\xff" + data)
    assert cli.run(transport.main, [str(tmp_path / "plain.log"), "--expect", "efa"]) == cli.OK
    plain = json.loads(capsys.readouterr().out)
    assert cli.run(transport.main, [str(tmp_path / "wide.log"), "--expect", "efa"]) == cli.OK
    assert json.loads(capsys.readouterr().out) == plain
    (tmp_path / "odd.log").write_bytes(b"\xff\xfe" + b"x")  # an odd byte count: no UTF-16 text
    assert cli.run(transport.main, [str(tmp_path / "odd.log")]) == cli.USAGE
    assert "starts as UTF-16 text but is not" in capsys.readouterr().err
