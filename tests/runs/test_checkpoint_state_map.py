"""workload/checkpoint/state_map.py: after the first save, the state a checkpoint saves is rebuilt from references
instead of DCP's get_state_dict walk, and it is exactly what get_state_dict returns (the same keys in the same
order, the same tensors' storage, the same other values), for full training and for adapters, after more steps too.
One rank of 2 on a fake process group, tiny shapes on CPU."""
from __future__ import annotations

import pytest
import torch
import torch.distributed as dist
from torch.testing._internal.distributed.fake_pg import FakeStore

from bench.record.adapter_memory import SMOKE_CONFIG, adapter_model
from workload.checkpoint import sharded
from workload.checkpoint.state_map import StateMap, same
from workload.config import TrainConfig
from workload.model.optimizer import build_optimizer
from workload.model.step import train_step


@pytest.fixture
def fake_group():
    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=2)
    yield
    dist.destroy_process_group()


def trained(method: str):
    adapters = {"lora_rank": 4} if method != "full" else {}
    cfg = TrainConfig(model_id="Qwen/Qwen2.5-0.5B", method=method, batch_size=1, seq_len=16, compile=False,
                      **adapters)
    model = adapter_model(dict(SMOKE_CONFIG), cfg, torch.device("cpu"))
    optimizer = build_optimizer(model, cfg)

    def step(seed: int) -> None:
        tokens = torch.randint(SMOKE_CONFIG["vocab_size"], (1, 16), generator=torch.Generator().manual_seed(seed))
        train_step(model, optimizer, tokens, cfg)

    step(0)
    return model, optimizer, step


@pytest.mark.parametrize("method", ["full", "lora"])
def test_the_rebuilt_state_is_dcps_state_after_more_steps(fake_group, method):
    model, optimizer, step = trained(method)
    states = StateMap(model, optimizer)
    first = states.state()
    assert states.learned, "a model of parameters alone is learned at the first save"
    assert same(first, sharded.state_to_save(model, optimizer))
    step(1)
    rebuilt = states.state()
    assert same(rebuilt, sharded.state_to_save(model, optimizer)), "the second save's state is DCP's"
    assert len(rebuilt[sharded.MODEL_KEY]) > 0 and len(rebuilt["optimizer"]["state"]) > 0
    if method == "lora":
        assert all("lora" in key for key in rebuilt[sharded.MODEL_KEY]), "a frozen base is not in the state"


def test_a_state_it_cannot_rebuild_is_asked_of_dcp_at_every_save(fake_group):
    model, optimizer, _ = trained("full")
    model.register_buffer("extra_state_buffer", torch.zeros(3))  # a persistent buffer: in the state, not a parameter
    states = StateMap(model, optimizer)
    state = states.state()
    assert "extra_state_buffer" in state[sharded.MODEL_KEY]
    assert not states.learned
    assert same(states.state(), sharded.state_to_save(model, optimizer))


def test_a_difference_from_dcps_answer_is_caught():
    tensor = torch.zeros(4)
    assert same({"a": tensor, "b": 1.0}, {"a": tensor, "b": 1.0})
    assert not same({"a": tensor.clone(), "b": 1.0}, {"a": tensor, "b": 1.0}), "another storage"
    assert not same({"b": 1.0, "a": tensor}, {"a": tensor, "b": 1.0}), "another order"
    assert not same({"a": tensor, "b": 2.0}, {"a": tensor, "b": 1.0}), "another value"
