"""A run's event file whose whole record holds no TensorBoard event (issue 44): tools.loss_curve refuses it, exit 2,
naming the file and the record's index, not a protobuf DecodeError traceback; a payload that is no protocol buffer
message at all is answered before protobuf's modules load (workload/protobuf_wire.py), one that is a message
but no Event by protobuf's own parser. Files tensorboardX wrote pass both."""
from __future__ import annotations

import struct

import pytest

from tests.support.cli_process import run_cli
from workload import cli, protobuf_wire
from workload.metrics import tensorboard as metrics

# (payload, protobuf's parser refuses it too): a varint key of 11 bytes, field number 0, wire type 7 (none), a
# group (type 3), a length past the end, a fixed64 cut off, a varint value cut off.
NO_MESSAGE = {"key longer than 10 bytes": b"\x80" * 11 + b"\x01", "field number 0": b"\x00\x01",
              "wire type 7": b"\x0f", "length past the end": b"\x2a\x05ab", "fixed64 cut off": b"\x09\x00\x00",
              "varint cut off": b"\x10\x80"}


def _record(payload: bytes) -> bytes:
    # The CRCs are not checked by the reader (a cut-off file is, by its lengths): zeros stand for them.
    return struct.pack("<Q", len(payload)) + b"\0" * 4 + payload + b"\0" * 4


def _run_with(tmp_path, payload: bytes):
    """A run whose tensorboard/ holds tensorboardX's own file, then a file of two records, the second `payload`."""
    run = tmp_path / "run"
    log = metrics.MetricsLog(str(run), start_step=0)
    for step in (1, 2, 3):
        log.scalars(step, {"train/loss": 4.0 - step})
    log.close()
    good = sorted((run / "tensorboard").glob(metrics.EVENT_FILES))
    assert good, "tensorboardX wrote a file"
    first = next(metrics._records(str(good[0])))
    bad = run / "tensorboard" / "events.out.tfevents.9999999999.host.1.0"
    bad.write_bytes(_record(first) + _record(payload))
    return run, bad


def test_every_record_tensorboardx_writes_is_a_message_to_the_wire_walk(tmp_path):
    run, bad = _run_with(tmp_path, b"")
    bad.unlink()
    records = [record for path in sorted((run / "tensorboard").glob(metrics.EVENT_FILES))
               for record in metrics._records(str(path))]
    assert len(records) >= 4 and all(protobuf_wire.problem(record) is None for record in records), records
    assert metrics.read_scalars(str(run / "tensorboard"))["train/loss"] == [(1, 3.0), (2, 2.0), (3, 1.0)]


@pytest.mark.parametrize("case", NO_MESSAGE)
def test_a_payload_that_is_no_message_is_refused_as_protobuf_would(tmp_path, case):
    from google.protobuf.message import DecodeError
    from tensorboardX.proto.event_pb2 import Event

    payload = NO_MESSAGE[case]
    assert protobuf_wire.problem(payload) is not None, case
    with pytest.raises(DecodeError):
        Event.FromString(payload)  # the rule refuses no payload protobuf itself would read
    run, bad = _run_with(tmp_path, payload)
    with pytest.raises(ValueError) as refused:
        metrics.read_scalars(str(run / "tensorboard"))
    assert str(refused.value).startswith(f"{bad}: record 1 (counting from 0)"), refused.value


def test_a_message_that_is_no_event_is_refused_by_protobufs_parser(tmp_path):
    payload = b"\x2a\x02\xff\xff"  # field 5 (summary), two bytes that are no Summary
    assert protobuf_wire.problem(payload) is None, "a message at its top level"
    run, bad = _run_with(tmp_path, payload)
    with pytest.raises(ValueError, match="does not parse as an Event") as refused:
        metrics.read_scalars(str(run / "tensorboard"))
    assert str(refused.value).startswith(f"{bad}: record 1"), refused.value


def test_loss_curve_refuses_it_in_its_lines_before_protobuf_loads(tmp_path):
    run, bad = _run_with(tmp_path, bytes(range(200, 256)))
    code, stderr, loaded, _ = run_cli("tools.loss_curve", [str(run), "--out", str(tmp_path / "curve.svg")],
                                      watch=("tensorboardX", "google.protobuf", "torch"))
    assert code == cli.USAGE, f"exit {cli.USAGE}, got {code}: {stderr[-600:]}"
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and f"{bad}: record 1" in lines[0] and "Traceback" not in stderr, stderr[-600:]
    assert loaded == [], f"answered before {loaded} loaded"
    assert not (tmp_path / "curve.svg").exists()
