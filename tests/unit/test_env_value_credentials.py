"""trainEnv's values are shown on Ray's dashboard: a credential under a neutral name is refused naming trainEnv and
sent to trainSecretEnv, by the rule that masks tokens in every refusal (workload/config/secret_text.py holds_token:
each vendor's shape in fields.TOKEN_VALUE, Grafana's glc_/glsa_ among them, and any random-looking run), never by
a list of names; the values jobs really set are left alone. The local run's variables are quoted by the same rule."""
from __future__ import annotations

import pytest

from infra import config
from tests.program.test_refusals_at_preview import DEV

JOB = {"trainEnabled": True}
# Grafana's two shapes (gitleaks' grafana-cloud-api-token and grafana-service-account-token) and two shapes no vendor
# rule lists: a base62 key and a base64 secret (as an AWS secret access key is written), under neutral names.
CREDENTIALS = [
    ("DASHBOARD_REF", "glc_" + "eyJvIjoiOTg3NjU0IiwibiI6Im1ldHJpY3MiLCJrIjoiUTdwMng5In0="),
    ("METRICS_PUSH", "glsa_" + "Hq2Wm8Rt4Yz6Kp1Lx9Vb3Nc7Df5Gs0Aj" + "_0a1b2c3d"),
    ("UPLOAD_TARGET", "Zr8Qm2Vx7Kp4Ty1Lw9Hs3Nd6Bf5Gj0Xc"),
    ("SYNC_CONFIG", "region=eu-west-1;secret=q8Wz/Lm3Xv+7Rt2Yp9Nk4Hs6Bd1Fj5Gc0Tv"),
]
# What jobs set: paths, URLs without credentials, NCCL/libfabric and allocator values, hex digests and commit ids, a
# UUID, plain words and CamelCase names, a Ray-style job id.
LEGIT = ["DATA_ROOT=/fsx/cache/corpus/v2", "METRICS_URL=https://metrics.internal.example.org/push",
         "NCCL_NET=AWS Libfabric", "NCCL_ALGO=Ring,Tree", "NCCL_PROTO=Simple", "FI_EFA_USE_DEVICE_RDMA=1",
         "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True", "MODEL_SHA=" + "3f2a9c" * 6 + "d4e1",
         "SOURCE_COMMIT=9fceb02d0ae598e95dc970b74767f19372d61af8", "RUN_TAG=6f1c2e4a-9b7d-4c3e-8a51-2d0f7e6b9c14",
         "ARCH=Qwen2ForCausalLM", "TEAM_NOTE=fine tuning the harbour assistant", "JOB_REF=raysubmit_Xk3Lm9Qp2Wt7",
         "TOKENIZERS_PARALLELISM=false", "OUTPUT_PREFIX=s3://company-data/runs/ray-train-fsdp-llm-1-0a1b2c3d"]


@pytest.mark.parametrize("name, value", CREDENTIALS, ids=[name for name, _ in CREDENTIALS])
def test_a_credential_under_a_neutral_name_in_train_env_is_refused_unquoted(name, value):
    with pytest.raises(ValueError) as refused:
        config.parse(DEV | {**JOB, "trainEnv": ["OMP_NUM_THREADS=4", f"{name}={value}"]})
    said = str(refused.value)
    assert said.startswith("config key 'trainEnv': entry 1") and "trainSecretEnv" in said, said
    assert value[5:25] not in said and len(said.splitlines()) == 1, said


def test_the_values_jobs_set_are_accepted():
    parsed = config.parse(DEV | {**JOB, "trainEnv": LEGIT})
    assert len(parsed.train.env) == len(LEGIT)


def test_the_local_runs_variable_is_quoted_only_when_it_holds_no_credential():
    from workload.run.variable_values import _shown

    assert _shown("WANDB_MODE", "offlien") == "WANDB_MODE=offlien"
    for _, value in CREDENTIALS[:3]:
        assert _shown("WANDB_MODE", value) == f"WANDB_MODE ({len(value)} characters)"
