"""A config.json whose activation transformers has no class for (workload/model/activations.py): refused by the gate's
checks that need no transformers, before torch is imported, in the words of the build's own refusal; the names read
from transformers' source text are ACT2CLS's keys, checked against transformers itself."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from workload.model import activations, compatibility

TINY_LLAMA = {"model_type": "llama", "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
              "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 256, "max_position_embeddings": 128}


def test_the_names_read_from_source_are_act2cls_keys():
    from transformers.activations import ACT2CLS

    assert activations.known_activations() == frozenset(ACT2CLS)


@pytest.mark.parametrize("field", activations.ACTIVATION_FIELDS)
def test_an_unknown_activation_is_refused_naming_the_field(field):
    with pytest.raises(ValueError) as refused:
        compatibility.check_raw({**TINY_LLAMA, field: "gelu_tanh_v9"}, "--model_id acme/m")
    said = str(refused.value)
    assert said.startswith("--model_id acme/m: its config.json does not build a llama model (KeyError: "
                           "'gelu_tanh_v9')"), said
    assert f"its {field} is no activation" in said and "silu" in said and "\n" not in said, said


def test_the_activations_transformers_has_pass():
    for name in ("silu", "gelu_pytorch_tanh", "gelu_new", "relu2"):
        compatibility.check_raw({**TINY_LLAMA, "hidden_act": name}, "--model_id acme/m")
    compatibility.check_raw({**TINY_LLAMA, "hidden_act": None}, "--model_id acme/m")  # the family's default


def test_the_fast_refusal_says_what_the_build_says():
    """The gate's slow path (the model built after transformers' imports) gives the same first words."""
    from transformers import AutoConfig

    config = AutoConfig.for_model("llama", **{**{k: v for k, v in TINY_LLAMA.items() if k != "model_type"},
                                              "hidden_act": "gelu_tanh_v9"})
    with pytest.raises(ValueError) as built:
        compatibility.build(config, "--model_id acme/m")
    with pytest.raises(ValueError) as fast:
        compatibility.check_raw({**TINY_LLAMA, "hidden_act": "gelu_tanh_v9"}, "--model_id acme/m")
    slow = str(built.value)
    prefix = "--model_id acme/m: its config.json does not build a llama model (KeyError: 'gelu_tanh_v9')"
    assert slow.startswith(prefix) and str(fast.value).startswith(prefix), (slow, str(fast.value))


_CHECK = """
import json, sys
from workload.model import compatibility
try:
    compatibility.check_raw(json.loads(sys.argv[1]), "trainModelId")
    said = ""
except ValueError as error:
    said = str(error)
print(json.dumps({"said": said, "torch": "torch" in sys.modules, "transformers": "transformers" in sys.modules}))
"""


def test_refused_without_importing_torch():
    done = subprocess.run([sys.executable, "-c", _CHECK, json.dumps({**TINY_LLAMA, "hidden_act": "swiglu_x"})],
                          capture_output=True, text=True, timeout=60, check=True)
    answer = json.loads(done.stdout)
    assert "(KeyError: 'swiglu_x')" in answer["said"], answer
    assert not answer["torch"] and not answer["transformers"], answer
