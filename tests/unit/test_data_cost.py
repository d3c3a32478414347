"""The data stage's estimate at preview (infra/preview/data_cost.py): tokens, shards, the stage's seconds and the room
on the nodes' disks, worked by hand from the measured figures (bench/results/data_scale-cpu-2026-12-06.jsonl) and the
instance facts (tests/support/instance_facts.py)."""
from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest

from infra.preview import data_cost
from tests.support.instance_facts import INSTANCE_FACTS

REPO = Path(__file__).resolve().parents[2]
G6 = INSTANCE_FACTS["g6.12xlarge"]  # 48 vCPUs, 4 x 940 GB NVMe


def size(stored: float, name: str = "corpus.jsonl") -> data_cost.DatasetSize:
    return data_cost.DatasetSize(int(stored), stored * data_cost.expansion(name), "s3 object")


def test_text_tokens_shards_and_seconds_from_a_known_size():
    plan = data_cost.estimate(size(1.2e9), "text", cpus=82)
    tokens = 1.2e9 / 6.07
    assert plan.tokens == pytest.approx(tokens)
    assert plan.shard_bytes == pytest.approx(tokens * 4), "one int32 a token"
    assert plan.stage_bytes == pytest.approx(tokens * 8), "the ids' stream and the shards, both on the head at once"
    assert plan.stage_seconds == pytest.approx(tokens / (404_000 * 82))
    assert plan.summary() == ("data: ~1.2 GB s3 object -> ~197.7 M tokens, shards ~790.8 MB, stage ~6 s on 82 Ray "
                              "CPUs (a cache hit tokenizes nothing)"), plan.summary()


def test_chat_blocks_hold_ids_labels_and_positions_with_the_packings_padding():
    for data_format in ("chat", "prompt-completion"):
        plan = data_cost.estimate(size(100e6), data_format, cpus=2)
        tokens = 100e6 / 5.76
        assert plan.tokens == pytest.approx(tokens)
        assert plan.shard_bytes == pytest.approx(tokens * 1.35 * 3 * 4)
        assert plan.stage_bytes == pytest.approx(plan.shard_bytes + tokens * 8)
        assert plan.stage_seconds == pytest.approx(tokens / (293_000 * 2))


def test_the_figures_are_the_benchmarks():
    """The constants are the measured rows' own: bytes a token within 1%, the packing's slots, each format's lowest
    rate per CPU second, and the shards' bytes of the rows within 1%."""
    rows = [json.loads(line) for line in (REPO / "bench/results/data_scale-cpu-2026-12-06.jsonl").open()]
    stages = [row for row in rows if row["measure"] == "stage"]
    for kind, key in (("text", "text"), ("chat", "examples")):
        measured = [row for row in stages if row["kind"] == kind]
        for row in measured:
            assert row["dataset_bytes"] / row["tokens"] == pytest.approx(data_cost.BYTES_PER_TOKEN[key], rel=0.01)
            plan = data_cost.estimate(data_cost.DatasetSize(row["dataset_bytes"], row["dataset_bytes"], ""),
                                      "text" if kind == "text" else "chat", cpus=1)
            assert plan.shard_bytes == pytest.approx(row["shard_bytes"], rel=0.01), (kind, row["shard_bytes"])
        assert data_cost.TOKENS_PER_CPU_SECOND[key] == pytest.approx(
            min(row["tokens_per_worker_cpu_s"] for row in measured), rel=0.001)


def test_the_shards_width_is_what_shards_writes():
    from workload.data import shards

    assert np.dtype(shards.TOKEN_DTYPE).itemsize == data_cost.TOKEN_BYTES


def test_compressed_files_hold_more_text():
    assert data_cost.expansion("data/train-00000-of-00001.parquet") == 1.7
    assert data_cost.expansion("corpus.jsonl.gz") == 3.0
    assert data_cost.expansion("corpus.jsonl") == data_cost.expansion("corpus.txt") == 1.0
    assert data_cost.estimate(size(1e9, "a.parquet"), "text", 1).tokens == pytest.approx(1.7e9 / 6.07)


def test_the_ray_cpus_are_the_worker_pods_and_the_heads():
    # g6.12xlarge: 48 - (2 + 48 // 8) = 40 a worker pod (infra/kubernetes/devices.py), and the head's 2.
    assert data_cost.ray_cpus(G6, 2) == 82
    assert data_cost.ray_cpus(INSTANCE_FACTS["p5.48xlarge"], 1) == 192 - (2 + 24) + 2


def test_the_heads_system_disk_bounds_the_stage_before_the_nvme_does():
    # The head packs on its 100 GiB system disk: 90% less the image's 50 GiB, 40 GiB for the streams and the shards
    # (8 bytes a text token), so about 32 GB of text; g6.12xlarge's NVMe (3,760 GB, 90% usable, less a 46 GB
    # checkpoint share, 4 bytes a token) would hold a hundred times more, so the head's disk is named.
    room = (100 * 0.9 - 50) * 2**30
    fits = data_cost.estimate(size(room / 8 * 6.07 * 0.99), "text", 82)
    data_cost.check_fits(fits, "s3://data/a.jsonl", G6, 200, checkpoint_node_bytes=46e9)
    too_large = data_cost.estimate(size(room / 8 * 6.07 * 1.01), "text", 82)
    with pytest.raises(ValueError) as refused:
        data_cost.check_fits(too_large, "s3://data/a.jsonl", G6, 200, checkpoint_node_bytes=46e9)
    message = str(refused.value)
    assert message.startswith("config key 'trainDataset': s3://data/a.jsonl (~32.9 GB s3 object, ~5.4 B tokens) "
                              "makes ~21.7 GB of token shards, which the Ray head packs beside their token streams "
                              "(~43.4 GB at once) on its 100 GiB system disk, ~42.9 GB usable beside the image"), message
    assert message.endswith("; allowed: a dataset of at most ~32.6 GB stored") and "\n" not in message, message


def test_shards_too_large_for_a_nodes_nvme_are_refused_naming_the_key_and_what_fits():
    small = dataclasses.replace(G6, instance_store_gb=20, instance_store_disks=1)  # a type with 20 GB of NVMe
    largest = 20e9 * 0.9 / 4 * 6.07  # 18 GB usable, 4 bytes a token: the node's limit is below the head's
    data_cost.check_fits(data_cost.estimate(size(largest * 0.99), "text", 82), "d", small, 200)
    plan = data_cost.estimate(size(largest * 1.01), "text", 82)
    with pytest.raises(ValueError) as refused:
        data_cost.check_fits(plan, "s3://data/huge.jsonl", small, 200)
    message = str(refused.value)
    assert message.startswith("config key 'trainDataset': s3://data/huge.jsonl (~27.6 GB s3 object"), message
    assert "more than each GPU node's data cache holds: g6.12xlarge's 20 GB instance store NVMe, ~18.0 GB usable " \
           "(kubelet evicts below 10% free); allowed: a dataset of at most ~27.3 GB stored, or a gpuInstanceType with " \
           "more instance store" in message, message


def test_without_instance_store_the_root_volume_holds_the_shards_beside_the_image_and_a_checkpoint():
    bare = dataclasses.replace(G6, instance_store_gb=0, instance_store_disks=0)
    room = (100 * 0.9 - 50) * 2**30  # 40 GiB of a 100 GiB root volume
    assert data_cost.node_disk(bare, 100)[0] == pytest.approx(room)
    plan = data_cost.estimate(size((room - 30e9) / 4 * 6.07 * 1.05), "text", 82)
    with pytest.raises(ValueError, match=r"^config key 'trainDataset': .* the 100 GiB gp3 root volume "
                                         r"\(gpuRootVolumeGiB; 50 GiB of it the image\), ~42.9 GB usable .*, less a "
                                         r"checkpoint's ~30.0 GB share; .* or a larger gpuRootVolumeGiB$"):
        data_cost.check_fits(plan, "s3://data/big.jsonl", bare, 100, checkpoint_node_bytes=30e9)
    data_cost.check_fits(plan, "s3://data/big.jsonl", bare, 200, checkpoint_node_bytes=30e9)


def test_the_summary_says_hours_and_the_dict_its_basis():
    plan = data_cost.estimate(size(2e12), "text", 82)
    assert "stage ~2.8 h on 82 Ray CPUs" in plan.summary(), plan.summary()
    found = plan.as_dict()
    assert found["tokens_millions"] == pytest.approx(2e12 / 6.07 / 1e6, abs=0.1)
    assert found["shards_gb"] == pytest.approx(2e12 / 6.07 * 4 / 1e9, abs=0.001)
    assert "data_scale-cpu-2026-12-06.jsonl" in found["basis"], found
