"""The preview's refusals that config.json's fields decide, made before the model gate's torch and transformers
imports (seconds): qlora's NF4 shards and the memory plan of a family whose structure config.json's arithmetic gives
(workload.model.structure.arithmetic_linear_shapes), in a fresh interpreter whose modules are then read; a model that
fits still goes through the gate, which alone builds it."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from workload.model import architectures

REPO = Path(__file__).resolve().parents[2]
# Under the Pulumi mocks, with the fake Hub serving the config given on stdin: the refusal, then whether torch,
# transformers or torchao were imported.
SCRIPT = """
import json, os, sys
from tests.support.fake_hub import FakeHub
from tests.support.pulumi_mocks import run_program_expecting_error
config = sys.stdin.read().encode()
with FakeHub(repos={"acme/odd-kv": {"config.json": config, "model.safetensors": b"\\0"}}) as server:
    os.environ["HF_ENDPOINT"] = server.url
    failed = run_program_expecting_error("dev", json.loads(sys.argv[1]))
print(json.dumps({"error": str(failed.error), "resources": len(failed.resources),
                  "imported": sorted(name for name in ("torch", "transformers", "torchao") if name in sys.modules)}))
"""
# 1600 wide in 16 heads of 100, one key/value head: k_proj and v_proj are 100 x 1600, whose 8 shards of 12.5 rows
# are no whole rows.
ODD_KV = dict(architectures.published("Qwen/Qwen2.5-1.5B"), hidden_size=1600, num_attention_heads=16,
              num_key_value_heads=1, intermediate_size=4352, num_hidden_layers=4)
OLMO_2 = json.loads((REPO / "tests" / "fixtures" / "model_configs" / "allenai--OLMo-2-1124-7B.json").read_text())


def preview(overrides: dict, config: dict) -> dict:
    done = subprocess.run([sys.executable, "-c", SCRIPT, json.dumps(overrides)], input=json.dumps(config), cwd=REPO,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_qlora_shards_of_a_hub_model_of_a_known_family_are_refused_without_torch():
    seen = preview({"trainEnabled": True, "trainMethod": "qlora", "trainModelId": "acme/odd-kv"}, ODD_KV)
    assert seen["error"].startswith("config keys 'trainMethod', 'trainNumWorkers': qlora on 8 workers: acme/odd-kv's "
                                    "self_attn.k_proj (100 x 1600) does not split into 8 shards"), seen
    assert "allowed: trainNumWorkers 1, 2, 4 of the 8 GPUs, or trainMethod lora" in seen["error"], seen
    assert seen["resources"] == 0, "refused before any resource"
    assert seen["imported"] == [], f"the refusal came from config.json's arithmetic, yet {seen['imported']} loaded"


def test_the_memory_plan_of_a_hub_model_of_a_known_family_refuses_without_torch():
    # OLMo 2 grown to 72 layers (some 15.7 B parameters): its full fine-tune cannot fit dev's eight 24 GB L4s.
    seen = preview({"trainEnabled": True, "trainModelId": "acme/odd-kv"}, dict(OLMO_2, num_hidden_layers=72))
    assert seen["error"].startswith("config keys 'trainModelId', 'trainBatchSize', 'trainSeqLen': acme/odd-kv ("), seen
    assert "B parameters) needs" in seen["error"] and "allowed: trainMethod: lora" in seen["error"], seen
    assert seen["resources"] == 0, "refused before any resource"
    assert seen["imported"] == [], f"the refusal came from config.json's arithmetic, yet {seen['imported']} loaded"


def test_a_model_that_fits_still_meets_the_gate_which_alone_builds_it():
    # Small enough for any plan; a RoPE type transformers has no function for fails only as the model is built.
    seen = preview({"trainEnabled": True, "trainModelId": "acme/odd-kv"},
                   dict(OLMO_2, num_hidden_layers=2, rope_scaling={"rope_type": "mystery", "factor": 2.0}))
    assert seen["error"].startswith("config key 'trainModelId': acme/odd-kv: its config.json does not build a olmo2 "
                                    "model ("), seen
    assert "torch" in seen["imported"], "the gate built it"


def test_an_activation_transformers_lacks_is_refused_before_the_gate_in_its_words():
    # An activation ACT2FN has no class for fails as the model is built (KeyError); said from transformers' source
    # text before the imports (workload/model/activations.py), in the build's words.
    seen = preview({"trainEnabled": True, "trainModelId": "acme/odd-kv"},
                   dict(OLMO_2, num_hidden_layers=2, hidden_act="swishy"))
    assert seen["error"].startswith("config key 'trainModelId': acme/odd-kv: its config.json does not build a olmo2 "
                                    "model (KeyError: 'swishy')"), seen
    assert "torch" not in seen["imported"] and "transformers" not in seen["imported"], seen


def test_layers_the_job_cannot_plan_are_refused_from_config_json_without_torch():
    # A mixture of experts or a state-space hybrid is said by config.json's own fields (compatibility.mixer_problem),
    # not after the gate's imports: here a Qwen2-MoE-shaped config of 60 experts, and a Llama with Mamba layers.
    moe = dict(architectures.published("Qwen/Qwen2.5-1.5B"), model_type="qwen2_moe",
               architectures=["Qwen2MoeForCausalLM"], num_experts=60, num_experts_per_tok=4, moe_intermediate_size=1408,
               num_hidden_layers=4)
    seen = preview({"trainEnabled": True, "trainModelId": "acme/odd-kv"}, moe)
    assert "qwen2_moe is a mixture-of-experts model (num_experts 60)" in seen["error"], seen
    assert seen["imported"] == [], f"refused from config.json, yet {seen['imported']} loaded"
    hybrid = dict(architectures.published("meta-llama/Llama-3.2-1B"), mamba_d_state=16, num_hidden_layers=4)
    seen = preview({"trainEnabled": True, "trainModelId": "acme/odd-kv"}, hybrid)
    assert "llama is a hybrid of attention and state-space (Mamba) or recurrent layers (mamba_d_state)" in \
        seen["error"], seen
    assert seen["imported"] == [] and seen["resources"] == 0, seen


def test_a_model_of_another_kind_is_refused_from_config_json_without_torch():
    # A vision-language wrapper, an encoder-decoder and an encoder are said from config.json and transformers' source
    # text (compatibility.raw_kind_problem, workload/model/model_kinds.py), in the gate's words, not after its imports.
    llava = dict(architectures.published("Qwen/Qwen2.5-1.5B"), model_type="llava_next",
                 architectures=["LlavaNextForConditionalGeneration"], num_hidden_layers=4,
                 vision_config={"model_type": "clip_vision_model", "hidden_size": 1024},
                 text_config={"model_type": "qwen2", "hidden_size": 1536})
    seen = preview({"trainEnabled": True, "trainModelId": "acme/odd-kv"}, llava)
    assert seen["error"].startswith("config key 'trainModelId': acme/odd-kv: llava_next is a multimodal model "
                                    "(vision_config) around a qwen2 language model, not a text-only causal LM"), seen
    assert seen["imported"] == [] and seen["resources"] == 0, seen
    for model_type, said in (("mt5", "mt5 is an encoder-decoder (sequence-to-sequence) model"),
                             ("xlm-roberta", "xlm-roberta is an encoder (a masked-language model such as BERT)")):
        seen = preview({"trainEnabled": True, "trainModelId": "acme/odd-kv"},
                       dict(architectures.published("Qwen/Qwen2.5-1.5B"), model_type=model_type, num_hidden_layers=4))
        assert seen["error"].startswith(f"config key 'trainModelId': acme/odd-kv: {said}"), seen
        assert seen["imported"] == [] and seen["resources"] == 0, seen
