"""What a refusal or a warning may echo, by class: environment names that load code or turn verification off (in any
case), list keys bounded by count before anything walks them and duplicates named by one entry, trainSecretEnv's names
never quoted when shaped like tokens, image references by the distribution grammar, and a key the stack holds as a
secret kept out of warnings and out of plain resource inputs."""
from __future__ import annotations

import logging
import re
from pathlib import Path

import pytest

from infra.config import env_names
from infra.config.schema import LIST_MAX_ENTRIES, schema
from infra.kubernetes.images import check_image
from tests.program.test_refusals_at_preview import program_refusal, refusal
from tests.support.pulumi_mocks import Secret, _run, plain_strings

REPO = Path(__file__).resolve().parents[2]
SECRET = "PLANTEDk4Wv18"
CUSTOM_IMAGE = {"rayVersion": "2.58.0", "imageCudaVersion": "13.0"}
# A short refusal: one line that names what is wrong, never a list.
MAX_REFUSAL = 600


# ---- environment names: a class by a word of the name, in any case ------------------------------------------------

@pytest.mark.parametrize("key, entry, name", [
    ("trainEnv", "Http_Proxy=http://proxy.internal.example", "Http_Proxy"),  # requests reads any case
    ("trainEnv", "wandb_base_url=https://w.example.com", "wandb_base_url"),
    ("trainEnv", "NCCL_PROFILER_PLUGIN=/opt/p.so", "NCCL_PROFILER_PLUGIN"),
    ("trainEnv", "GST_PLUGIN_PATH=/opt/gst", "GST_PLUGIN_PATH"),
    ("trainEnv", "PYTHONPYCACHEPREFIX_PATH=/opt/x", "PYTHONPYCACHEPREFIX_PATH"),
    ("trainEnv", "OMPI_LD_PRELOAD_PREPEND=/opt/x.so", "OMPI_LD_PRELOAD_PREPEND"),
    ("trainEnv", "RAY_WORKER_STARTUP_HOOK=pkg.mod.fn", "RAY_WORKER_STARTUP_HOOK"),
    ("trainEnv", "WANDB_INSECURE_DISABLE_SSL=true", "WANDB_INSECURE_DISABLE_SSL"),
    ("trainEnv", "GIT_SSL_NO_VERIFY=1", "GIT_SSL_NO_VERIFY"),
    ("trainEnv", "NODE_EXTRA_CA_CERTS=/opt/ca.pem", "NODE_EXTRA_CA_CERTS"),
    ("trainEnv", "Aws_Endpoint_Url_S3=https://s3.other.example", "Aws_Endpoint_Url_S3"),
    ("trainSecretEnv", "Aws_Container_Authorization_Token=abc123", "Aws_Container_Authorization_Token"),
    ("trainSecretEnv", "ftp_proxy=http://p.example", "ftp_proxy"),
])
def test_env_names_that_load_code_or_redirect_are_refused_in_any_case(key, entry, name):
    message = refusal({key: [entry]})
    assert f"'{key}'" in message and name in message and "may not set" in message, f"{entry}: {message}"
    assert len(message) < MAX_REFUSAL, f"{entry}: one short line: {message}"


@pytest.mark.parametrize("name", ["NO_PROXY", "TORCH_EXTENSIONS_DIR", "NCCL_DEBUG_FILE", "PYTORCH_CUDA_ALLOC_CONF",
                                  "HF_HUB_ENABLE_HF_TRANSFER", "OMP_NUM_THREADS", "NCCL_NET", "TOKENIZERS_PARALLELISM",
                                  "GITHUB_SHA", "HF_HUB_DOWNLOAD_TIMEOUT"])
def test_ordinary_env_names_stay_allowed(name):
    assert env_names.reserved_reason(name) is None, f"{name} is a setting a job may want"


def test_every_node_local_directory_the_pods_are_given_is_reserved():
    """The names infra/kubernetes/local_storage.py sets on the workers, and the names that move a part of HF_HOME."""
    from infra.kubernetes import local_storage

    for name in [*local_storage.env(), "HF_HUB_CACHE", "HF_DATASETS_CACHE", "TRANSFORMERS_CACHE", "HF_XET_CACHE",
                 "HUGGINGFACE_HUB_CACHE", "hf_home"]:
        assert "local volume" in (env_names.reserved_reason(name) or ""), f"{name}: the pods' layout owns it"


def test_the_job_sets_on_its_pods_none_of_the_names_a_user_may_not():
    """The names the project sets on the job (infra/job/job_config.py's defaults) stay the user's to override."""
    from infra.job import job_config

    for name in job_config.job_env({}):
        assert env_names.reserved_reason(name) is None, f"{name}: the job sets it and the user may too"


# ---- list keys: a count first, a duplicate by one entry -----------------------------------------------------------

def _entries(key: str, count: int) -> list[str]:
    sample = {"vpcAvailabilityZones": "us-west-2b", "capacityCandidateAzs": "us-west-2c",
              "apiPublicAccessCidrs": "52.94.0.0/16", "clusterAdmins": "arn:aws:iam::111122223333:role/admin",
              "clusterViewers": "arn:aws:iam::111122223333:role/viewer", "trainPip": "einops==0.8.1",
              "trainEnv": "MY_SETTING=1", "trainSecretEnv": "WANDB_API_KEY=k"}[key]
    return [sample] * count


def test_every_list_key_has_a_count_bound():
    lists = {key for key, spec in schema().items() if spec["type"] == "array"}
    assert lists == set(LIST_MAX_ENTRIES), f"list keys without a bound: {lists - set(LIST_MAX_ENTRIES)}"


@pytest.mark.parametrize("key", sorted(LIST_MAX_ENTRIES))
def test_a_list_over_its_bound_is_refused_by_count_alone(key):
    bound = LIST_MAX_ENTRIES[key][0]
    entries = _entries(key, 30_000)
    message = refusal({key: entries})
    assert f"'{key}'" in message and "30000 entries" in message and f"at most {bound}" in message, message
    assert len(message) < MAX_REFUSAL, f"{key}: the refusal is {len(message)} characters"


@pytest.mark.parametrize("key, entries, first", [
    ("clusterViewers", ["arn:aws:iam::111122223333:role/a", "arn:aws:iam::111122223333:role/bb",
                        "arn:aws:iam::111122223333:role/a"], "entry 2"),
    ("clusterAdmins", ["arn:aws:iam::111122223333:user/x"] * 40, "entry 1"),
    ("apiPublicAccessCidrs", ["52.94.0.0/16", "3.5.0.0/16", "3.5.0.0/16"], "entry 2"),
    ("vpcAvailabilityZones", ["us-west-2c", "us-west-2d", "us-west-2c"], "entry 2"),
])
def test_a_duplicate_is_named_by_its_first_repeat_not_the_list(key, entries, first):
    message = refusal({key: entries})
    assert f"'{key}'" in message and first in message and "twice" in message, message
    others = [entry for entry in entries if entry != entries[int(first.split()[1])]]
    assert not any(other in message for other in others), f"{key}: quotes another entry: {message}"
    assert message.count(entries[0]) <= 1, f"{key}: quotes the list: {message}"


# ---- trainSecretEnv: a name shaped like a token is not quoted -----------------------------------------------------

def test_a_secret_env_name_shaped_like_a_token_is_named_by_its_position():
    name = "hf_" + SECRET + "z" * 24
    message = program_refusal({"trainSecretEnv": Secret([f"{name}=1", "WANDB_API_KEY=w", f"{name}=2"])})
    assert "'trainSecretEnv'" in message and "entry 2" in message and "entry 0" in message, message
    assert SECRET not in message, f"the refusal quotes the name: {message}"


def test_a_plain_env_name_set_twice_is_named():
    message = refusal({"trainEnv": ["MY_SETTING=1", "MY_SETTING=2"]})
    assert "MY_SETTING" in message and "entry 1" in message, message


# ---- image references: the distribution grammar, unquoted outside its characters ---------------------------------

@pytest.mark.parametrize("image, shown", [
    (f"registry.example.com/team/ray:2.58.0#sig={SECRET}", "'#'"),
    (f"registry.example.com/team/ray:2.58.0&auth={SECRET}", "'&'"),
    (f"registry.example.com/team/ray:2.58.0 {SECRET}", "a space"),
    (f"registry.example.com/team/ray:2.58.0\u00e9{SECRET}", "non-ASCII"),
])
def test_an_image_with_characters_outside_the_grammar_is_refused_unquoted(image, shown):
    with pytest.raises(ValueError) as refused:
        check_image(image)
    message = str(refused.value)
    assert "'dlcImage'" in message and shown in message and "character 36" in message, message
    assert SECRET not in message, f"the refusal quotes the value: {message}"


@pytest.mark.parametrize("image", ["registry.example.com/Team/ray:2.58.0", "registry.example.com/team//ray:2.58.0",
                                   "registry.example.com/team/ray-:2.58.0", "-registry.example.com/ray:2.58.0"])
def test_an_image_against_the_grammar_is_refused(image):
    with pytest.raises(ValueError, match="dlcImage.*not an image reference"):
        check_image(image)


def test_the_program_refuses_such_an_image_without_its_value():
    message = program_refusal({"dlcImage": f"registry.example.com/team/ray:2.58.0?access={SECRET}", **CUSTOM_IMAGE})
    assert "'dlcImage'" in message and SECRET not in message, message


# ---- a key the stack holds as a secret: not in a warning, not in a plain input ------------------------------------

def _run_logged(overrides, caplog, capsys):
    caplog.clear()
    with caplog.at_level(logging.INFO):
        run = _run("dev", overrides)
    captured = capsys.readouterr()
    logged = "\n".join(record.getMessage() for record in caplog.records) + captured.out + captured.err
    assert run.error is None, f"{overrides}: {run.error!r}"
    return run, logged


def _plain_holders(run, text):
    return sorted(f"{r.type} {r.name}" for r in run.resources if any(text in s for s in plain_strings(r.inputs)))


def test_a_secret_image_is_kept_out_of_warnings_and_plain_inputs(caplog, capsys):
    image = f"registry.example.com/{SECRET.lower()}/ray:nightly"  # a moving tag: warned of
    run, logged = _run_logged({"dlcImage": Secret(image), "gpuIdleStopMinutes": 60, **CUSTOM_IMAGE}, caplog, capsys)
    assert "moves" in logged and "dlcImage" in logged, "the moving-tag warning is still given"
    assert SECRET.lower() not in logged, "a warning quotes the secret image"
    assert _plain_holders(run, SECRET.lower()) == [], "the secret image is in plain inputs"
    # The control: the same image set in plain text is in the RayCluster's inputs, so the check above could fail.
    plain, logged = _run_logged({"dlcImage": image, "gpuIdleStopMinutes": 60, **CUSTOM_IMAGE}, caplog, capsys)
    assert SECRET.lower() in logged and any("RayCluster" in holder for holder in _plain_holders(plain, SECRET.lower()))


def test_a_secret_model_id_is_kept_out_of_warnings_and_plain_inputs(caplog, capsys, monkeypatch):
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")  # nothing listens: the preview warns it could not read it
    model = f"planted-org/model-{SECRET}"
    run, logged = _run_logged({"trainEnabled": True, "trainModelId": Secret(model)}, caplog, capsys)
    assert "trainModelId" in logged, "the preview still warns that it could not read the model"
    assert SECRET not in logged, "a warning quotes the secret model id"
    assert _plain_holders(run, SECRET) == [], "the secret model id is in plain inputs"


def test_every_warning_goes_through_the_redacting_helper():
    """schema.warn blanks out secret config values; a pulumi.log.warn anywhere else would not."""
    direct = re.compile(r"pulumi\.log\.warn\b")
    offenders = [str(path.relative_to(REPO)) for path in [REPO / "__main__.py", *(REPO / "infra").rglob("*.py"),
                                                          *(REPO / "tools").rglob("*.py")]
                 if path != REPO / "infra" / "config" / "schema.py" and direct.search(path.read_text())]
    assert offenders == [], f"warn through infra.config.schema.warn instead: {offenders}"


def test_a_variable_in_both_env_keys_is_named_once():
    message = refusal({"trainEnv": ["ALPHA_SETTING=1", "BETA_SETTING=2"],
                       "trainSecretEnv": ["BETA_SETTING=x", "ALPHA_SETTING=y"]})
    assert "'trainSecretEnv'" in message and "ALPHA_SETTING (and 1 more)" in message, message
    assert "BETA_SETTING" not in message, f"one name, not the list: {message}"
