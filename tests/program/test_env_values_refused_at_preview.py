"""trainEnv's values refused at preview, naming the key and the entry: a value the job's processes refuse where they
start (the local run's own table, workload/run/variable_values.py: the interpreter's PYTHONHASHSEED, PYTHONUTF8, ...,
torch's PYTORCH_CUDA_ALLOC_CONF, and what the libraries parse at import or start,
workload/run/parsed_variables.py), and a header-list variable carrying a credential header
(OpenTelemetry's OTEL_EXPORTER_OTLP_*HEADERS, infra/config/env_names.py carries_credential_header), whose value is
never shown. The same values in their accepted forms pass."""
from __future__ import annotations

import pytest

from infra import config
from tests.program.test_refusals_at_preview import DEV, program_refusal, refusal

HIDDEN = "Tb5Nw2Jq8Lx4"


@pytest.mark.parametrize("entry, words", [
    ("PYTHONHASHSEED=0xdead", "Python refuses to start"),
    ("PYTHONHASHSEED=99999999999", "an integer from 0 to 4294967295"),
    ("PYTHONUTF8=on", "set 1 (UTF-8 mode) or 0"),
    ("PYTHONTRACEMALLOC=all", "a number of frames"),
    ("PYTHONIOENCODING=utf8x", "an encoding it does not know"),
    ("PYTORCH_CUDA_ALLOC_CONF=expandable_segments:1", "expandable_segments takes True or False"),
    ("PYTORCH_CUDA_ALLOC_CONF=max_split_size_mb:512,garbage_collection_threshold:0", "between 0.0 and 1.0"),
    ("PYTORCH_CUDA_ALLOC_CONF=max_split_size_mb:16", "at least 20"),
    ("PYTORCH_ALLOC_CONF=roundup_power2_divisions:5", "a power of 2"),
    ("PYTORCH_CUDA_ALLOC_CONF=backend:cudaMalloc", "native or cudaMallocAsync"),
    ("TRANSFORMERS_OFFLINE=enabled", "neither on nor off"),
    # What the libraries parse at import or start (workload/run/parsed_variables.py).
    ("HF_HUB_DOWNLOAD_TIMEOUT=1m", "huggingface_hub/constants.py fails at import"),
    ("HF_DATASETS_IN_MEMORY_MAX_SIZE=4GiB", "datasets/config.py fails at import"),
    ("TORCH_DISTRIBUTED_DEBUG=ALL", "one of OFF, INFO, DETAIL"),
    ("TORCH_LOGS=+dynamo,chatty", "fails at `import torch`"),
    ("TORCH_DIST_INIT_BARRIER=on", "fails in init_process_group"),
    ("HF_HUB_DISABLE_XET=disable", "neither on nor off"),
])
def test_a_value_the_job_refuses_at_start_is_refused_at_preview(entry, words):
    message = refusal({"trainEnv": ["TOKENIZERS_PARALLELISM=false", entry]})
    assert message.startswith("config key 'trainEnv': entry 1: ") and words in message, f"{entry}: {message}"
    assert entry.partition("=")[0] in message and len(message) < 400, f"{entry}: one short line: {message}"


@pytest.mark.parametrize("entry", [
    f"OTEL_EXPORTER_OTLP_HEADERS=authorization=Bearer%20{HIDDEN}",
    f"OTEL_EXPORTER_OTLP_TRACES_HEADERS=x-scope-orgid=ml,X-API-Key={HIDDEN}",
    f"OTEL_EXPORTER_OTLP_METRICS_HEADERS=dd-api-key={HIDDEN}",
    f"OTEL_EXPORTER_OTLP_LOGS_HEADERS=signoz-access-token={HIDDEN}",
    f"OTEL_EXPORTER_OTLP_HEADERS=Proxy-Authorization=Basic%20{HIDDEN}",
    f"COLLECTOR_HEADERS=Cookie=session%3D{HIDDEN}",
])
def test_a_header_list_with_a_credential_header_is_refused_unquoted(entry):
    message = program_refusal({"trainEnv": [entry]})
    name = entry.partition("=")[0]
    assert "'trainEnv'" in message and name in message and "trainSecretEnv" in message, f"{entry}: {message}"
    assert HIDDEN not in message and "Bearer" not in message, f"{entry}: echoed: {message}"


@pytest.mark.parametrize("entries", [
    ["PYTHONHASHSEED=1234", "PYTHONUTF8=1", "PYTHONTRACEMALLOC=10", "PYTHONIOENCODING=utf-8:backslashreplace"],
    ["PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True,max_split_size_mb:256,garbage_collection_threshold:0.8"],
    ["PYTORCH_CUDA_ALLOC_CONF=roundup_power2_divisions:[256:1,512:2,1024:4,>:8],backend:native"],
    ["HF_HUB_DOWNLOAD_TIMEOUT=60", "HF_DATASETS_IN_MEMORY_MAX_SIZE=2e9", "TORCH_DISTRIBUTED_DEBUG=detail",
     "TORCH_LOGS=+dynamo,recompiles,-inductor", "TORCH_DIST_INIT_BARRIER=1", "HF_HUB_DISABLE_XET=yes"],
    ["PYTHONHASHSEED=random", "OTEL_EXPORTER_OTLP_HEADERS=x-scope-orgid=team-a,env=prod",
     "OTEL_SERVICE_NAME=trainer"],
])
def test_the_accepted_forms_pass(entries):
    parsed = config.parse(DEV | {"trainEnv": entries})
    assert parsed is not None, entries


def test_the_header_list_goes_in_train_secret_env():
    entry = f"OTEL_EXPORTER_OTLP_HEADERS=authorization=Basic%20{HIDDEN}"
    assert config.parse(DEV | {"trainSecretEnv": [entry]}) is not None, "trainSecretEnv is where it belongs"


@pytest.mark.parametrize("stack, entry, words", [
    ("dev", "NCCL_ALGO=nvlstree", "NVLSTree needs NVLink SHARP"),
    ("g6e", "FI_EFA_USE_DEVICE_RDMA=on", "g6e.12xlarge's EFA has no RDMA read"),
])
def test_a_fabric_setting_the_instance_cannot_honour_is_refused(stack, entry, words):
    """infra/preview/fabric_env.py, with the stack's instance type read through the mocks' EC2."""
    message = program_refusal({"trainEnabled": True, "trainEnv": [entry]}, stack)
    assert "'trainEnv'" in message and entry.partition("=")[0] in message and words in message, f"{entry}: {message}"
