"""A checkpoint or a model is copied onto a node once, in parallel parts, and its ranks share the copy
(workload/node_copy.py; the resume's workload.storage.node_local_checkpoint and an s3:// --model_id's
workload.model.files go through it). Two processes on one "node" copy from moto's S3 server (tests/s3_policy_server.py,
every request recorded) and from a local directory standing in for it: the files are fetched once, whole."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import boto3
import pytest

from tests.support.fake_s3 import PolicyEnforcingS3
from workload import node_copy, storage

# Its own bucket: moto keeps one S3 per process, which tests/program/test_storage_policy.py's server shares.
BUCKET, KEY = "node-copy-bucket", "AKIANODECOPY00000001"
# Small parts so that one file of the test is several ranged reads (the job's are 64 MiB).
PART_BYTES = 1 << 20
FILES = {"__0_0.distcp": os.urandom(3 * PART_BYTES + 12345), "__1_0.distcp": os.urandom(PART_BYTES),
         ".metadata": b"dcp metadata", "sub/empty.json": b""}
# One process of the node: wait at `start` so both race for the lock, copy, print what it copied.
RANK = """
import json, os, sys, time
import pyarrow.fs
from workload import node_copy
node_copy.PART_BYTES = int(sys.argv[4])
while not os.path.exists(sys.argv[3]):
    time.sleep(0.01)
filesystem, path = pyarrow.fs.FileSystem.from_uri(sys.argv[1])
print(json.dumps(node_copy.copy_once(filesystem, path, sys.argv[2])))
"""


@pytest.fixture(scope="module")
def s3():
    server = PolicyEnforcingS3({KEY: None})
    server.start()
    client = boto3.client("s3", endpoint_url=server.url, region_name="us-west-2", aws_access_key_id=KEY,
                          aws_secret_access_key="secret")
    client.create_bucket(Bucket=BUCKET, CreateBucketConfiguration={"LocationConstraint": "us-west-2"})
    for name, body in FILES.items():
        client.put_object(Bucket=BUCKET, Key=f"run/checkpoint_000004/{name}", Body=body)
    yield server
    server.stop()


@pytest.fixture
def aws(s3, monkeypatch):
    for name in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_CONTAINER_CREDENTIALS_FULL_URI"):
        monkeypatch.delenv(name, raising=False)
    for name, value in {"AWS_ENDPOINT_URL_S3": s3.url, "AWS_ACCESS_KEY_ID": KEY, "AWS_SECRET_ACCESS_KEY": "secret",
                        "AWS_REGION": "us-west-2", "AWS_DEFAULT_REGION": "us-west-2",
                        "AWS_EC2_METADATA_DISABLED": "true"}.items():
        monkeypatch.setenv(name, value)
    s3.seen.clear()
    return s3


def two_ranks(source: str, destination: str, start: str) -> list[tuple[int, int]]:
    ranks = [subprocess.Popen([sys.executable, "-c", RANK, source, destination, start, str(PART_BYTES)],
                              stdout=subprocess.PIPE, text=True) for _ in range(2)]
    open(start, "w").close()
    outputs = [rank.communicate(timeout=120)[0] for rank in ranks]
    assert all(rank.returncode == 0 for rank in ranks), outputs
    return [tuple(json.loads(output)) for output in outputs]


def read_tree(directory: str) -> dict[str, bytes]:
    return {os.path.relpath(os.path.join(root, name), directory): open(os.path.join(root, name), "rb").read()
            for root, _, names in os.walk(directory) for name in names}


def test_two_ranks_of_a_node_fetch_an_s3_checkpoint_once_in_parts(aws, tmp_path):
    destination = str(tmp_path / "nvme" / "checkpoint_000004")
    copied = sorted(two_ranks(f"s3://{BUCKET}/run/checkpoint_000004", destination, str(tmp_path / "go")))
    total = sum(len(body) for body in FILES.values())
    assert copied == [(0, 0), (len(FILES), total)], f"one rank copies everything, the other nothing: {copied}"
    assert read_tree(destination) == FILES, "the node's copy is the checkpoint, byte for byte"
    gets = [seen for seen in aws.seen if seen.operation == "GetObject"]
    parts = sum(max(1, -(-len(body) // PART_BYTES)) for body in FILES.values() if body)
    assert len(gets) == parts, f"each part fetched once over both ranks: {parts} ranged GETs, saw {len(gets)}"


def test_a_local_directory_standing_in_for_s3_is_copied_once_too(tmp_path):
    source = tmp_path / "bucket" / "model"
    for name, body in FILES.items():
        (source / name).parent.mkdir(parents=True, exist_ok=True)
        (source / name).write_bytes(body)
    destination = str(tmp_path / "hf" / "model")
    copied = sorted(two_ranks(f"file://{source}", destination, str(tmp_path / "go")))
    assert copied[0] == (0, 0) and copied[1][0] == len(FILES), copied
    assert read_tree(destination) == FILES


def test_a_resume_copies_an_s3_checkpoint_onto_the_staging_disk_and_reads_a_local_one_in_place(aws, tmp_path,
                                                                                           monkeypatch):
    import pyarrow.fs

    monkeypatch.setattr(node_copy, "PART_BYTES", PART_BYTES)
    monkeypatch.setenv(storage.CHECKPOINT_STAGING_ENV, str(tmp_path / "staging"))
    filesystem, path = pyarrow.fs.FileSystem.from_uri(f"s3://{BUCKET}/run/checkpoint_000004")
    directory = storage.node_local_checkpoint(filesystem, path)
    assert directory.startswith(str(tmp_path / "staging")), directory
    assert read_tree(directory) == FILES
    storage.remove_node_local_checkpoint(directory, path)
    assert not os.path.exists(directory)
    assert storage.node_local_checkpoint(pyarrow.fs.LocalFileSystem(), str(tmp_path)) == str(tmp_path)


def test_a_half_copied_file_is_never_taken_for_a_whole_one(tmp_path, monkeypatch):
    import pyarrow.fs

    source = tmp_path / "source"
    source.mkdir()
    (source / "weights.safetensors").write_bytes(FILES["__0_0.distcp"])
    monkeypatch.setattr(node_copy, "PART_BYTES", PART_BYTES)
    real = pyarrow.fs.LocalFileSystem()

    class ResetOnThirdRead:
        """The local filesystem, except that the third ranged read fails, as a connection reset does."""

        reads = 0

        def get_file_info(self, selector):
            return real.get_file_info(selector)

        def open_input_file(self, path):
            filesystem, opened = self, real.open_input_file(path)

            class Reader:
                def __enter__(self):
                    return self

                def __exit__(self, *exc):
                    opened.close()

                def read_at(self, nbytes, offset):
                    filesystem.reads += 1
                    if filesystem.reads == 3:
                        raise OSError("connection reset (stand-in)")
                    return opened.read_at(nbytes, offset)

            return Reader()

    destination = tmp_path / "copy"
    with pytest.raises(OSError, match="connection reset"):
        node_copy.copy_tree(ResetOnThirdRead(), str(source), str(destination))
    assert os.listdir(destination) == [], "no file, whole or partial, under its own name after a failed copy"
    assert node_copy.copy_tree(real, str(source), str(destination))[0] == 1
    assert read_tree(str(destination)) == {"weights.safetensors": FILES["__0_0.distcp"]}
