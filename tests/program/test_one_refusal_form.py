"""Every kind of refusal at preview has the one form infra.config.config_error writes, `config key 'X': ...` or
`config keys 'X', 'Y': ...`: the kinds that used to start `rayNamespace: ...`, `rayClusterName: ...`,
`config keys ['rayVersion', 'imageCudaVersion']: ...`, `config keys 'A' and 'B': ...` or `config keys 'typo' (did you
mean ...) are not declared`, each through the whole program under mocks. program_refusal asserts the form for every
program-refusal table (tests/unit/test_refusal_form.py holds each `raise ValueError` in infra/ to it)."""
from __future__ import annotations

import pytest

from tests.program.test_refusals_at_preview import program_refusal

CASES = [
    ("rayNamespace", {"rayNamespace": "kube-system"}, "config key 'rayNamespace': 'kube-system' is created and deleted"),
    ("rayNamespace", {"rayNamespace": "Ray_NS"}, "config key 'rayNamespace': 'Ray_NS' must be a DNS-1123 label"),
    ("rayClusterName", {"rayClusterName": "ray.cluster"},
     "config key 'rayClusterName': 'ray.cluster' must be a DNS-1035 label"),
    ("dlcImage", {"dlcImage": "registry.example.com/ray"}, "config key 'dlcImage': 'registry.example.com/ray' has "
                                                            "neither a tag nor a digest"),
    ("rayVersion and imageCudaVersion", {"dlcImage": "registry.example.com/ray:2.58.0"},
     "config keys 'rayVersion', 'imageCudaVersion': dlcImage 'registry.example.com/ray:2.58.0' is not an image"),
    ("imageCudaVersion", {"dlcImage": "registry.example.com/ray:2.58.0", "rayVersion": "2.58.0"},
     "config key 'imageCudaVersion': dlcImage"),
    ("an undeclared key", {"gpuNodeCout": 4},
     "config key 'gpuNodeCout': not declared in Pulumi.yaml, so Pulumi would ignore 'gpuNodeCout' (did you mean "
     "'gpuNodeCount'?)"),
    ("aws:assumeRole", {"aws:assumeRole": {"roleArn": "arn:aws:iam::123456789012:role/deployer"}},
     "config key 'aws:assumeRole': pulumi-aws 6's"),
    ("tokenizer and model", {"trainEnabled": True, "trainDataset": "org/corpus",
                             "trainStoragePath": "s3://company-data/runs", "trainModelId": "meta-llama/Llama-3.2-1B",
                             "trainTokenizer": "Qwen/Qwen3-0.6B"},
     "config keys 'trainTokenizer', 'trainModelId': the tokenizer Qwen/Qwen3-0.6B"),
    ("qlora's shards", {"trainEnabled": True, "trainMethod": "qlora", "trainNumWorkers": 6},
     "config keys 'trainMethod', 'trainNumWorkers': qlora on 6 workers"),
]


@pytest.fixture(autouse=True)
def _no_hub(monkeypatch):
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")  # the shipped sizes only


@pytest.mark.parametrize("kind, overrides, start", CASES, ids=[case[0] for case in CASES])
def test_each_kind_of_refusal_has_the_common_form(kind, overrides, start):
    message = program_refusal(overrides)
    assert message.startswith(start), f"{kind}: {message}"
