"""workload.model.fp8: which layers run their matmuls in fp8, and the refusal on GPUs without fp8 tensor cores."""
from __future__ import annotations

from pathlib import Path
from unittest import mock

import pytest
import torch

from workload.config import TrainConfig
from workload.model import fp8
from workload.model.build import build_model

# Where scripts/setup.sh installs torchao: beside .venv's packages, not in them (setup.sh says why).
FP8_PACKAGES = Path(__file__).resolve().parents[2] / ".venv" / "fp8"


@pytest.fixture
def torchao_on_path(monkeypatch):
    if not (FP8_PACKAGES / "torchao").is_dir():
        pytest.fail(f"torchao is not in {FP8_PACKAGES}: run `bash scripts/setup.sh`, which installs it there")
    monkeypatch.syspath_prepend(str(FP8_PACKAGES))


def test_decoder_linears_become_fp8_and_embedding_and_lm_head_stay(torchao_on_path):
    model = build_model(TrainConfig(model_config="tiny"), torch.device("cpu"))
    batch = torch.randint(0, 512, (2, 32), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        expected = model(batch)
    swapped = fp8.convert(model.layers)
    linears_per_layer = 7  # q, k, v, o, gate, up, down
    assert swapped == linears_per_layer * len(model.layers), f"swapped {swapped} linear layers"
    assert type(model.lm.lm_head).__name__ == "Linear" and model.lm.lm_head.weight is model.lm.model.embed_tokens.weight, \
        "the tied lm_head stays a bf16 nn.Linear sharing the embedding"
    loss = model(batch)
    loss.backward()
    # fp8 operands change the numbers (so the swap took effect) but not the loss beyond fp8's rounding.
    assert loss.item() != expected.item() and abs(loss.item() - expected.item()) < 0.05, (loss, expected)
    grad = model.layers[0].mlp.down_proj.weight.grad
    assert grad is not None and torch.isfinite(grad).all(), "the weight gradient flows through the fp8 matmul"


def test_fp8_is_refused_on_a_gpu_without_fp8_tensor_cores():
    with mock.patch.object(torch.cuda, "get_device_capability", return_value=(8, 0)), \
            mock.patch.object(torch.cuda, "get_device_name", return_value="NVIDIA A100-SXM4-40GB"):
        with pytest.raises(ValueError, match=r"--fp8 needs a GPU with fp8 tensor cores.*A100.* is 8\.0"):
            fp8.check_device(torch.device("cuda", 0))
    assert fp8.gpu_has_fp8("L4") and fp8.gpu_has_fp8("NVIDIA H200") and not fp8.gpu_has_fp8("A100")


@pytest.mark.parametrize("gpus, refused", [
    (None, "this machine has no NVIDIA GPU (no nvidia-smi)"),
    ([], "this machine has no NVIDIA GPU (nvidia-smi lists none)"),
    (["NVIDIA A100-SXM4-80GB, 8.0", "NVIDIA A100-SXM4-80GB, 8.0"], "this machine's GPUs are NVIDIA A100-SXM4-80GB (8.0)"),
    (["Tesla T4, 7.5", "NVIDIA L40S, 8.9"], None),
    (["NVIDIA H200, 9.0"], None),
    (["NVIDIA L4, [N/A]"], None),  # an older driver without compute_cap: the name decides
    (["Tesla V100-SXM2-16GB, [N/A]"], "this machine's GPUs are Tesla V100-SXM2-16GB"),
])
def test_the_local_run_asks_nvidia_smi_whether_a_gpu_has_fp8(gpus, refused):
    """workload.run.checks.check_fp8's question, without torch: compute capability 8.9+ on any GPU of the machine."""
    problem = fp8.local_gpus_problem(lambda: gpus)
    assert problem == refused if refused is None else problem.startswith(refused), problem

