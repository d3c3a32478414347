"""Issue 22's security review, items 5, 7, 8, 13 and 15: bad input is refused at preview naming the key (or the
flag), in one line, before any resource and without quoting a secret.

Most cases go straight to the validation the program runs first (infra.config.parse, infra.config.pip_requirements, the
job's flags through infra.job.job_config.workload_config): milliseconds each. One case per kind runs the whole program
under mocks, to show the refusal comes at preview with nothing registered; the secret cases all do, since what
they check (the stack's secret keys, Pulumi's typed reads) exists only inside the program.
"""
from __future__ import annotations

import dataclasses

import pytest

from infra import config
from infra.config import pip_requirements
from infra.job import job_config
from infra.preview import job_plan
from tests.support.instance_facts import INSTANCE_FACTS
from tests.support.pulumi_mocks import Secret, run_program_expecting_error, stack_settings
from workload import cli
from workload.config import TrainConfig

TOKEN = "hf_sentinelTOKEN1234"
DEV = stack_settings("dev")
G6 = INSTANCE_FACTS["g6.12xlarge"]
JOB_ON = {"trainEnabled": True}


def refusal(overrides: dict, stack_defaults: dict = DEV) -> str:
    """The message config.parse refuses `overrides` with (on the dev stack unless told)."""
    with pytest.raises(ValueError) as refused:
        config.parse(stack_defaults | overrides)
    return str(refused.value)


def load_refusal(overrides: dict) -> str:
    """The message config.load (the program's first step) refuses `overrides` with, read through Pulumi's config as
    the CLI passes it (tests/support/pulumi_mocks.stack_config), secret keys included; nothing else of the program runs."""
    import pulumi
    from pulumi.runtime import config as runtime_config

    from tests.support.pulumi_mocks import secret_keys, stack_config

    previous = dict(runtime_config.CONFIG.get()), list(runtime_config._SECRET_KEYS.get())
    pulumi.runtime.set_all_config(stack_config("dev", overrides), secret_keys(overrides))
    try:
        with pytest.raises(ValueError) as refused:
            config.load()
    finally:
        pulumi.runtime.set_all_config(*previous)
    assert "\n" not in str(refused.value), f"{overrides}: one line: {refused.value}"
    return str(refused.value)


def program_refusal(overrides: dict, stack: str = "dev") -> str:
    failed = run_program_expecting_error(stack, overrides)
    assert isinstance(failed.error, ValueError), f"{overrides}: expected a ValueError, got {failed.error!r}"
    assert failed.resources == [], f"{overrides}: refused before any resource, got {len(failed.resources)}"
    message = str(failed.error)
    assert "\n" not in message, f"{overrides}: one line: {message}"
    assert config.REFUSAL_FORM.match(message), f"{overrides}: the common form, config key 'X': ... : {message}"
    return message


# ---- item 5: where checkpoints and data may be ------------------------------------------------------------------

@pytest.mark.parametrize("key, value, words", [
    ("trainStoragePath", "s3://company-data", ["bucket root", "s3://bucket/prefix"]),
    ("trainStoragePath", "s3://company-data/", ["bucket root"]),
    ("trainStoragePath", "s3://company-data/runs/../other-team", ["'..'"]),
    ("trainStoragePath", "s3://company-data/runs//a", ["empty"]),
    ("trainStoragePath", "s3://company-data/./runs", ["'.'"]),
    ("trainStoragePath", "S3://company-data/runs", ["lowercase"]),
    ("trainStoragePath", "gs://company-data/runs", ["gs://", "S3 only"]),
    ("trainStoragePath", "file://mnt/checkpoints", ["file:///path"]),
    ("trainStoragePath", "/mnt/../etc/checkpoints", ["'..'"]),
    ("trainDataset", "https://example.com/corpus.jsonl", ["https://", "s3://bucket/key.jsonl"]),
    ("trainDataset", "gs://company-data/corpus.jsonl", ["gs://"]),
    ("trainDataset", "S3://company-data/corpus.jsonl", ["lowercase"]),
    ("trainDataset", "s3://company-data//corpus.jsonl", ["empty"]),
    ("trainDataset", "s3://company-data/a/../corpus.jsonl", ["'..'"]),
])
def test_storage_and_dataset_locations_are_refused_naming_the_key(key, value, words):
    message = refusal({key: value})
    missing = [word for word in [f"config key {key!r}", *words] if word not in message]
    assert not missing, f"{key}={value!r}: the refusal should say {missing}: {message}"


def test_a_prefix_and_a_local_path_on_one_node_stay_allowed():
    assert config.parse(DEV | {"trainStoragePath": "s3://company-data/team/runs/"}).train.storage_path
    assert config.parse(DEV | {"trainStoragePath": "file:///mnt/checkpoints", "gpuNodeCount": 1}).train.storage_path


def test_a_bucket_root_and_node_local_file_uris_are_refused_at_preview():
    assert "bucket root" in program_refusal({"trainStoragePath": "s3://company-data"})
    message = program_refusal({**JOB_ON, "trainStoragePath": "file:///mnt/checkpoints"})
    assert "trainStoragePath" in message and "2 GPU nodes" in message, message


# ---- item 7: no secret's value in a refusal ----------------------------------------------------------------------

# Every way a refusal could quote a secret: the config's typed reads, its checks, the preview's checks of the job.
SECRET_ECHOES = {
    # `pulumi config set --secret --path 'trainSecretEnv.HF_TOKEN' ...` makes an object
    "secret env as an object": ({"trainSecretEnv": Secret({"HF_TOKEN": TOKEN})}, "trainSecretEnv"),
    "secret env entry as an object": ({"trainSecretEnv": Secret([{"HF_TOKEN": TOKEN}])}, "trainSecretEnv"),
    "secret env entry not a string": ({"trainSecretEnv": Secret([f"HF_TOKEN={TOKEN}", 7])}, "trainSecretEnv"),
    "plain env as an object": ({"trainEnv": {"MY_TOKEN": TOKEN}}, "trainEnv"),
    "a secret integer key": ({"gpuNodeCount": Secret(f"two-{TOKEN}")}, "gpuNodeCount"),
    "a secret run id": ({"trainRunId": Secret(f"a/{TOKEN}")}, "trainRunId"),
    "a secret storage path": ({"trainStoragePath": Secret(f"gs://{TOKEN}/runs")}, "trainStoragePath"),
    "an index URL with a token": ({"trainPip": [f"--index-url https://user:{TOKEN}@pypi.example.com/simple"]},
                                  "trainPip"),
    "a URL requirement with a token": ({"trainPip": [f"pkg @ https://{TOKEN}@example.com/pkg.whl"]}, "trainPip"),
}
# The same, from the checks that need the cloud's answers (infra.preview.feasibility.plan_stack), through the whole program.
SECRET_ECHOES_AT_PREVIEW = {
    "a secret dataset on this machine": ({**JOB_ON, "trainDataset": Secret(f"/home/{TOKEN}/corpus.jsonl")},
                                         "trainDataset"),
    "trainEnv NCCL_NET=Socket against efa": ({**JOB_ON, "trainEnv": ["NCCL_NET=Socket"],
                                              "trainSecretEnv": Secret([f"HF_TOKEN={TOKEN}"])},
                                             "trainExpectTransport"),
}


@pytest.mark.parametrize("case", [*SECRET_ECHOES, *SECRET_ECHOES_AT_PREVIEW])
def test_no_refusal_quotes_a_secret(case):
    if case in SECRET_ECHOES:
        (overrides, key), refused = SECRET_ECHOES[case], load_refusal
    else:
        (overrides, key), refused = SECRET_ECHOES_AT_PREVIEW[case], program_refusal
    message = refused(overrides)
    assert key in message, f"{case}: the refusal must name {key}: {message}"
    assert TOKEN not in message, f"{case}: the refusal quotes the secret: {message}"


def test_the_issues_secret_object_is_refused_at_preview_without_its_value():
    message = program_refusal({"trainSecretEnv": Secret({"HF_TOKEN": TOKEN})})
    assert "trainSecretEnv" in message and "list of strings" in message and TOKEN not in message, message


# ---- item 8: trainPip -------------------------------------------------------------------------------------------

@pytest.mark.parametrize("entry", [
    f"--index-url https://user:{TOKEN}@pypi.example.com/simple", "-e git+https://github.com/example/pkg",
    "-r requirements.txt", "https://example.com/pkg-1.0-py3-none-any.whl", "./dist/pkg-1.0-py3-none-any.whl",
    "/tmp/pkg-1.0.tar.gz", "torch==2.1.0 --no-deps", "einops\n--index-url https://evil.example.com/simple",
    f"pkg @ https://user:{TOKEN}@example.com/pkg.whl", "Torch_", "RAY[train]>=2.40",
    "nvidia_nccl_cu12; python_version > '3'", "pytorch.triton", "torch ; extra == 'x'",
])
def test_pip_takes_requirement_specifiers_for_packages_not_of_the_image(entry):
    with pytest.raises(ValueError, match="config key 'trainPip'") as refused:
        pip_requirements.check_requirements([entry])
    assert TOKEN not in str(refused.value) and "\n" not in str(refused.value), refused.value


def test_pip_specifiers_with_extras_versions_and_markers_pass():
    entries = ["einops==0.8.1", "datasets>=3; python_version >= '3.10'", "accelerate[deepspeed]~=1.0", "raydp",
               "transformers==5.*", "Transformers>=5.14,<6", "peft!=0.21.2", "torchao"]
    assert pip_requirements.check_requirements(entries) == tuple(entries)


@pytest.mark.parametrize("entry, name", [("transformers<5", "transformers"), ("transformers~=4.57", "transformers"),
                                         ("Transformers==4.*", "transformers"), ("peft>=0.10,<0.20", "peft"),
                                         ("torchao==0.9.0", "torchao")])
def test_pip_may_not_hold_back_a_library_of_the_job_below_what_its_code_runs_on(entry, name):
    with pytest.raises(ValueError, match=rf"entry 0 .* allows no {name} at or after "
                                         rf"{pip_requirements.JOB_LIBRARY_FLOORS[name]}, the oldest the job's code"):
        pip_requirements.check_requirements([entry])


# ---- item 13: bounds and shapes ---------------------------------------------------------------------------------

@pytest.mark.parametrize("overrides, key", [
    ({"trainBatchSize": 1_000_000_000}, "trainBatchSize"),
    ({"trainBatchSize": config.MAX_BATCH_SIZE + 1}, "trainBatchSize"),
    ({"trainTimeoutMinutes": 10**15}, "trainTimeoutMinutes"),
    ({"trainTimeoutMinutes": config.MAX_TIMEOUT_MINUTES + 1}, "trainTimeoutMinutes"),
    ({"capacityReserve": True, "capacityReservationHours": 10**12}, "capacityReservationHours"),
    ({"trainMinBusBandwidthGBps": "inf"}, "trainMinBusBandwidthGBps"),
    ({"trainMinBusBandwidthGBps": "1e400"}, "trainMinBusBandwidthGBps"),
    ({"ncclSocketIfname": "eth0;touch /tmp/x"}, "ncclSocketIfname"),
    ({"ncclSocketIfname": "eth0\nNCCL_DEBUG=TRACE"}, "ncclSocketIfname"),
    ({"ncclSocketIfname": "eth0\n"}, "ncclSocketIfname"),
    ({"fiProvider": "efa\n"}, "fiProvider"),
    ({"clusterName": "ray-train\n"}, "clusterName"),
    ({"kubernetesVersion": "1.34\n"}, "kubernetesVersion"),
    ({"gpuAvailabilityZone": "us-west-2a\n"}, "gpuAvailabilityZone"),
    ({"systemInstanceType": "m7i.xlarge\n"}, "systemInstanceType"),
    ({"capacityReservationId": "cr-0123456789abcdef0\n"}, "capacityReservationId"),
    ({"rayVersion": "2.58.0\n"}, "rayVersion"),
    ({"imageCudaVersion": "13.0\n"}, "imageCudaVersion"),
    ({"trainRunId": "1\n"}, "trainRunId"),
    ({"clusterAdmins": ["arn:aws:iam::123456789012:role/ops\n"]}, "clusterAdmins"),
    ({"trainEnv": ["NCCL_NET\n=Socket"]}, "trainEnv"),
    ({"trainStoragePath": "s3://company-data\n/runs"}, "trainStoragePath"),
])
def test_out_of_bounds_and_trailing_newlines_are_refused_naming_the_key(overrides, key):
    assert f"config key {key!r}" in refusal(overrides), overrides


def test_a_billion_sequences_are_refused_at_preview_before_the_memory_search():
    assert "trainBatchSize" in program_refusal({**JOB_ON, "trainBatchSize": 1_000_000_000})


@pytest.mark.parametrize("ifname", ["eth0", "eth", "^docker,lo", "=eth0", "ens5,eth"])
def test_nccl_interface_lists_as_nccl_takes_them_pass(ifname):
    assert config.parse(DEV | {"ncclSocketIfname": ifname}).transport_env["NCCL_SOCKET_IFNAME"] == ifname


def test_a_minimum_bus_bandwidth_above_the_nodes_network_is_refused():
    # g6.12xlarge: 40 Gbit/s, 5 GB/s between nodes; the dev stack's 8 workers span its 2 nodes.
    def check(minimum: str, nodes: int = 2) -> None:
        cfg = config.parse(DEV | JOB_ON | {"trainMinBusBandwidthGBps": minimum, "gpuNodeCount": nodes})
        job_plan.check_min_bus_bandwidth(cfg, G6, workers=4 * nodes)

    with pytest.raises(ValueError, match=r"'trainMinBusBandwidthGBps'.*allowed: 0 \(no minimum\) to 5"):
        check("5.5")
    check("5")
    check("50", nodes=1)  # within one node the bound is NVLink's or PCIe's, which EC2 does not give


# ---- item 15: messages name what the user set -------------------------------------------------------------------

@pytest.mark.parametrize("overrides, keys", [
    ({"trainCheckpointEvery": 10}, ["'trainCheckpointEvery'", "trainStoragePath"]),
    ({"trainDataset": "s3://company-data/corpus.xlsx", "trainStoragePath": "s3://company-data/runs"},
     ["'trainDataset'", ".jsonl"]),  # .parquet, .csv are formats
])
def test_the_jobs_own_checks_name_the_stack_keys(overrides, keys):
    with pytest.raises(ValueError) as refused:
        job_config.workload_config(config.parse(DEV | JOB_ON | overrides), G6)
    message = str(refused.value)
    assert all(key in message for key in keys) and "--" not in message, \
        f"the refusal must name {keys} and no job flag: {message}"


@pytest.mark.parametrize("name", ["../evil", "team/dev", "..", "dev\n"])
def test_capacity_refuses_a_stack_name_that_leaves_the_project(name, tmp_path, capsys):
    from tools.capacity import cli as capacity

    project = tmp_path / "project"
    project.mkdir()
    (project / "Pulumi.yaml").write_text("name: raytrain-eks\nconfig: {}\n")
    argv = ["--instance-type", "g6.12xlarge", "--count", "2", "--project-dir", str(project), "--write-stack", name]
    assert capacity.main(argv) == cli.USAGE, f"--write-stack {name!r} must be a usage error"
    assert "--write-stack" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["Pulumi.yaml", "project"], "nothing may be written"


@pytest.mark.parametrize("name", [".", ".."])
def test_a_run_name_that_is_a_directory_of_its_own_is_refused(name):
    with pytest.raises(ValueError, match="--run_name"):
        TrainConfig(run_name=name)


def test_export_onto_an_existing_file_is_one_line_and_exit_2(tmp_path, capsys):
    from workload.checkpoint import export

    existing = tmp_path / "model.safetensors"
    existing.write_text("not a directory")
    assert cli.run(export.main, [str(tmp_path / "checkpoint_000001"), str(existing)]) == cli.USAGE
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and str(existing) in lines[0], f"one line naming OUT: {lines}"


def test_the_workload_and_the_stack_agree_on_the_flags_the_stack_sets():
    fields = {field.name for field in dataclasses.fields(TrainConfig)}
    assert set(job_config.STACK_KEYS) <= fields, set(job_config.STACK_KEYS) - fields
    assert set(job_config.STACK_KEYS.values()) <= set(config.schema()), "every key named is one Pulumi.yaml declares"
