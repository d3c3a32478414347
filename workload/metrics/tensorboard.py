"""Per-step metrics as TensorBoard event files under the run's storage path: `tensorboard --logdir RUN/tensorboard`
shows the curves (train/loss, train/learning_rate, train/tokens_per_s, eval/loss), and `read_scalars` reads them back
without TensorBoard (tools/loss_curve.py draws the README's picture from them).

Rank 0 writes them with tensorboardX, which Ray Train depends on (ray[train] here and in the cluster image carry it),
else with torch.utils.tensorboard (which needs the tensorboard package); with neither, the run says so once and logs
only to its output. For a remote storage path (s3://...) the files are written to a local directory and copied up
at every checkpoint and at the end: the event writers want a local file they can append to.

A run resumed at step k starts its event file with TensorBoard's purge marker at step k + 1, so the curves show the
resumed steps once, not again beside those the interrupted attempt had logged past its last checkpoint.
"""
from __future__ import annotations

import glob
import os
import shutil
import struct
import sys
import tempfile

from workload import protobuf_wire, storage

DIRECTORY = "tensorboard"
EVENT_FILES = "events.out.tfevents.*"


def _summary_writer_class():
    try:
        from tensorboardX import SummaryWriter
    except ImportError:
        try:
            from torch.utils.tensorboard import SummaryWriter
        except ImportError:
            return None
    return SummaryWriter


class MetricsLog:
    """Rank 0's TensorBoard writer for a run directory (None: no storage path, nothing is written).

    At every checkpoint (`sync`) the event file is closed and, for a remote run directory, copied up; the run goes on
    in a new file. Closing is what writes every event: tensorboardX's flush leaves the ones still queued for its
    writer thread unwritten, and an attempt that fails after its checkpoint must not lose the steps before it."""

    def __init__(self, run_directory: str | None, start_step: int) -> None:
        self.destination = storage.join(run_directory, DIRECTORY) if run_directory else None
        self.writer = None
        if self.destination is None:
            return
        self.writer_class = _summary_writer_class()
        if self.writer_class is None:
            print("metrics: neither tensorboardX nor tensorboard is installed: no TensorBoard event files "
                  "(pip install tensorboardX)", file=sys.stderr, flush=True)
            self.destination = None
            return
        remote = storage.is_remote(self.destination)
        self.local = tempfile.mkdtemp(prefix="tensorboard-") if remote else self.destination
        self.start_step, self.files = start_step, 1
        self.writer = self._open(purge_step=start_step + 1 if start_step else None)

    def _open(self, purge_step: int | None = None):
        # File names start with the second they were made in; the suffix orders an attempt's files, and attempts
        # started within one second, as they were written (zero-padded: names sort as text).
        return self.writer_class(self.local, purge_step=purge_step,
                                 filename_suffix=f".from_step_{self.start_step:08d}.{self.files:04d}")

    def scalars(self, step: int, values: dict[str, float]) -> None:
        if self.writer is not None:
            for tag, value in values.items():
                self.writer.add_scalar(tag, value, step)

    def sync(self) -> None:
        """Complete the event file so far, copy it up to a remote run directory, and go on in a new one."""
        if self.writer is None:
            return
        self._complete()
        self.files += 1
        self.writer = self._open()

    def close(self) -> None:
        if self.writer is None:
            return
        self._complete()
        self.writer = None
        if self.local != self.destination:
            shutil.rmtree(self.local, ignore_errors=True)

    def _complete(self) -> None:
        self.writer.close()
        if self.local != self.destination:
            storage.upload(self.local, self.destination)


def read_scalars(directory: str) -> dict[str, list[tuple[int, float]]]:
    """Every scalar of a directory's event files as {tag: [(step, value), ...]}, in the order written, after
    TensorBoard's purge markers are applied (a resumed attempt's steps replace the interrupted one's): what
    TensorBoard's own EventAccumulator shows for them.

    A whole record whose payload is no Event is refused (ValueError naming the file and the record's index), not
    skipped: TensorBoard's reader stops quietly only where a record is cut off or fails its checksum (tensorboard/
    backend/event_processing/event_file_loader.py RawEventFileLoader.Load: DataLossError, "a record may be
    truncated", as _records ends at a record claiming more than the file holds), while EventFileLoader.Load parses
    every record it was given with event_pb2.Event.FromString and raises protobuf's DecodeError for one that is not
    an Event. A curve drawn from the records before it would look whole and hide the steps after it."""
    from workload import user_files

    paths = sorted(glob.glob(os.path.join(directory, EVENT_FILES)))
    for path in paths:  # each a regular file without holes, before the protocol buffers' imports (a second)
        if (why := user_files.problem(path, user_files.UNBOUNDED)) is not None:
            raise ValueError(f"{path} {why}")
    whole = False
    for path in paths:  # each record's payload a protocol buffer message, before protobuf's imports (a second)
        for index, record in enumerate(_records(path)):
            whole = True
            if (why := protobuf_wire.problem(record)) is not None:
                raise ValueError(_no_event(path, index, why))
    if not whole:
        return {}  # no file holds one whole record (none, cut off, or claiming more than it holds): no scalar to read
    try:  # tensorboardX's package imports its writers with it: over a second
        from tensorboardX.proto.event_pb2 import Event, SessionLog
    except ImportError:  # the same protocol buffers, as the tensorboard package ships them
        from tensorboard.compat.proto.event_pb2 import Event, SessionLog

    from google.protobuf.message import DecodeError

    series: dict[str, list[tuple[int, float]]] = {}
    for path in paths:
        for index, record in enumerate(_records(path)):
            try:
                event = Event.FromString(record)
            except DecodeError:
                raise ValueError(_no_event(path, index, "does not parse as an Event protocol buffer")) from None
            if event.session_log.status == SessionLog.START:
                for points in series.values():
                    points[:] = [point for point in points if point[0] < event.step]
            for value in event.summary.value:
                if value.HasField("simple_value"):
                    series.setdefault(value.tag, []).append((event.step, value.simple_value))
    return series


def _no_event(path: str, index: int, why: str) -> str:
    return (f"{path}: record {index} (counting from 0) is whole but holds no TensorBoard event (its payload {why}); "
            "allowed: event files that tensorboardX or torch.utils.tensorboard wrote")


def _records(path: str):
    """The payloads of a TFRecord file: each is a little-endian uint64 length, its CRC, the data, the data's CRC. The
    file is one of the run's storage (untrusted): a regular file without holes (workload/user_files.py: a FIFO would
    wait for a writer), and a record claiming more than the file holds ends it, as a file cut off mid-write does
    (TensorBoard stops there too), where reading the claimed length would allocate it."""
    from workload import user_files

    if (why := user_files.problem(path, user_files.UNBOUNDED)) is not None:
        raise ValueError(f"{path} {why}")
    size = os.path.getsize(path)
    with open(path, "rb") as file:
        while len(header := file.read(12)) == 12:
            (length,) = struct.unpack("<Q", header[:8])
            if length > size - file.tell():
                return
            yield file.read(length)
            file.read(4)
