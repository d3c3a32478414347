"""workload/checkpoint/generation_config.py's rules, held equal to transformers' own on a table of values: a
generation config is refused before the imports exactly when GenerationConfig.from_dict raises (validate()), or
generate() raises building its logits processors, on a tiny model."""
from __future__ import annotations

import warnings

import pytest

from workload.checkpoint.generation_config import generation_problem

TABLE = [
    {},
    {"do_sample": True, "temperature": 0.7, "top_p": 0.9, "top_k": 20},
    {"do_sample": True, "temperature": 0.0},
    {"do_sample": True, "temperature": 2},  # an int: TemperatureLogitsWarper wants a float
    {"do_sample": True, "temperature": 1},  # == 1.0: no warper built
    {"do_sample": False, "temperature": -3.0},  # not sampling: the warper is never built
    {"do_sample": True, "temperature": -0.5},
    {"do_sample": True, "temperature": "hot"},
    {"do_sample": True, "top_k": 0},
    {"do_sample": True, "top_k": -1},
    {"do_sample": True, "top_k": 2.5},
    {"do_sample": True, "top_p": 3.0},  # above 1: TopPLogitsWarper is not built
    {"do_sample": True, "top_p": -0.1},
    {"do_sample": True, "top_p": 0.0},
    {"do_sample": True, "min_p": 1.5},
    {"do_sample": True, "min_p": 0.05},
    {"do_sample": True, "typical_p": 0.0},
    {"do_sample": True, "typical_p": 0.5},
    {"repetition_penalty": 0.0},
    {"repetition_penalty": 1.2},
    {"repetition_penalty": 2},
    {"max_new_tokens": 0},
    {"max_new_tokens": -10},
    {"max_new_tokens": 3},
    {"max_new_tokens": "3"},
    {"early_stopping": "never"},
    {"early_stopping": "always"},
    {"assistant_ensemble_weight": 1.0},
    {"assistant_ensemble_weight": 0.5},
    {"cache_implementation": "static"},
    {"cache_implementation": "gpu"},
    {"compile_config": {"fullgraph": True}},
    {"num_return_sequences": 2},
    {"num_return_sequences": 2, "do_sample": True},
    {"num_return_sequences": 4, "num_beams": 2},
    {"num_return_sequences": 2, "num_beams": 2},
    {"suppress_tokens": [3, 4], "forced_eos_token_id": 3},
    {"suppress_tokens": [3, 4], "forced_eos_token_id": [3, 5]},
    {"streamer": "stdout"},
]


@pytest.fixture(scope="module")
def tiny_model():
    import torch
    from transformers import AutoModelForCausalLM, Qwen2Config

    from workload.config import TINY

    torch.manual_seed(0)
    return AutoModelForCausalLM.from_config(Qwen2Config(**TINY)).eval()


def _transformers_refuses(values: dict, model) -> bool:
    import torch
    from transformers import GenerationConfig

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            config = GenerationConfig.from_dict(dict(values))
            config.max_new_tokens = 1  # the length is not what is compared here (max_new_tokens' own rows: from_dict)
            config.pad_token_id = 0
            model.generate(torch.tensor([[1, 2, 3]]), generation_config=config)
    except (ValueError, TypeError):
        return True
    return False


@pytest.mark.parametrize("values", TABLE, ids=[str(values) for values in TABLE])
def test_refused_exactly_where_transformers_refuses(values, tiny_model):
    refused = generation_problem(values) is not None
    assert refused == _transformers_refuses(values, tiny_model), (
        f"{values}: ours {'refuses' if refused else 'takes'} it ({generation_problem(values)}), transformers "
        f"{'refuses' if not refused else 'takes'} it")


def test_the_refusal_names_the_key():
    assert generation_problem({"do_sample": True, "top_k": -7}).startswith("top_k must be")
    assert generation_problem({"cache_implementation": "gpu"}).startswith("cache_implementation must be one of")
    assert "streamer is an argument of generate()" in generation_problem({"streamer": "stdout"})
