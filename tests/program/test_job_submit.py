"""`python -m tools.job submit`: another run on the stack's live RayCluster without `pulumi up`, against the same
stand-ins as the README's long-run journey (tests/docs/test_readme.py: the API server, `aws eks get-token`, the job
server reached through a port-forward to the head pod), then found by `list` like the stack's own runs."""
from __future__ import annotations

import contextlib
import io
import json
import re

import pytest

from tools import job as job_cli
from workload import cli


def kubeconfig_for(tmp_path, server_url: str) -> str:
    path = tmp_path / "kubeconfig.json"
    path.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "dev",
        "clusters": [{"name": "dev", "cluster": {"server": server_url}}],
        "contexts": [{"name": "dev", "context": {"cluster": "dev", "user": "aws"}}],
        # pulumi-eks's kubeconfig user: the token from `aws eks get-token` (the kube_api fixture's stand-in).
        "users": [{"name": "aws", "user": {"exec": {"apiVersion": "client.authentication.k8s.io/v1beta1",
                                                    "command": "aws", "args": ["eks", "get-token"]}}}]}))
    return str(path)


def job_command(*argv: str) -> tuple[int, str]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = cli.run(job_cli.main, list(argv))
    return code, out.getvalue()


def test_submit_starts_the_stacks_job_with_other_flags_and_list_finds_it(tmp_path, kube_api, job_server):  # noqa: F811
    kubeconfig = kubeconfig_for(tmp_path, kube_api.url)
    code, said = job_command("submit", "--kubeconfig", kubeconfig, "--stack", "dev", "--run-id", "try-2",
                             "--", "--steps", "7", "--learning_rate", "2e-5")
    assert code == cli.OK, said
    (job_id,) = job_server.jobs
    job = job_server.jobs[job_id]
    assert job.metadata == {"raytrain.stack": "dev", "raytrain.run_id": "try-2"}, job.metadata
    assert re.fullmatch(r"raytrain-dev-try-2-[0-9a-f]{8}", job_id), job_id
    assert "--steps 7" in job.entrypoint and "--learning_rate 2e-05" in job.entrypoint, job.entrypoint
    assert re.search(r"--run_name ray-train-fsdp-llm-try-2-[0-9a-f]{8}", job.entrypoint), job.entrypoint
    assert "--time_limit_s 3600" in job.entrypoint, f"trainTimeoutMinutes' default is the job's limit: {job.entrypoint}"
    assert said.strip() == (f"job {job_id} (run try-2) submitted; follow it: python -m tools.job logs {job_id} "
                            f"--follow --stack dev --kubeconfig {kubeconfig}")

    code, listed = job_command("list", "--kubeconfig", kubeconfig, "--stack", "dev")
    assert code == cli.OK and re.search(rf"^{job_id}\s+\w+\s+try-2\s", listed, re.M), listed
    # The same submit again is the same job: attached to, not started twice.
    code, said = job_command("submit", "--kubeconfig", kubeconfig, "--stack", "dev", "--run-id", "try-2",
                             "--", "--steps", "7", "--learning_rate", "2e-5")
    assert code == cli.OK and "was already on the cluster" in said and len(job_server.jobs) == 1, said


def test_submit_refuses_a_flag_the_job_does_not_know_before_reaching_the_cluster(capsys):
    def no_cluster(args):
        raise AssertionError("a bad flag must be refused before the cluster is reached")

    with pytest.raises(SystemExit) as exited:
        job_cli.main(["submit", "--stack", "dev", "--", "--stepz", "7"], job_server=no_cluster)
    assert exited.value.code == cli.USAGE
    assert capsys.readouterr().err.splitlines() == ["error: unrecognized arguments: --stepz 7",
                                                     "`python -m workload.train --help` lists every flag "
                                                     "(did you mean --steps?)"]


class Reached(Exception):
    """The job server was asked for: everything before it passed."""


def test_submit_refuses_a_dataset_without_a_storage_path_before_reaching_the_cluster(tmp_path, capsys):
    """The data stage runs on the Ray head and keeps the token shards under --storage_path, which every GPU node reads;
    without one they would stay on the head's disk and every worker fail after the GPUs bill (the preview's
    trainDataset rule, infra/config/train_keys.py _check_data_storage)."""
    def no_cluster(args):
        raise AssertionError("a dataset without a storage path must be refused before the cluster is reached")

    code = cli.run(lambda argv: job_cli.main(argv, job_server=no_cluster),
                   ["submit", "--stack", "dev", "--", "--dataset", "org/corpus"])
    err = capsys.readouterr().err
    assert code == cli.USAGE, err
    (line,) = err.splitlines()
    assert line.startswith("error: --dataset org/corpus needs --storage_path") and "trainStoragePath" in line, line
    path = tmp_path / "run.yaml"
    path.write_text("dataset: s3://company-data/corpus.jsonl\n")
    code = cli.run(lambda argv: job_cli.main(argv, job_server=no_cluster),
                   ["submit", "--stack", "dev", "--config", str(path)])
    assert code == cli.USAGE and "--storage_path" in capsys.readouterr().err, "a dataset from --config's file too"

    def reached(args):
        raise Reached

    with pytest.raises(Reached):
        job_cli.main(["submit", "--stack", "dev", "--", "--dataset", "org/corpus",
                      "--storage_path", "s3://company-data/runs"], job_server=reached)
    # A printed file is for a local replay (one machine, no storage needed): printed, not refused.
    code = cli.run(lambda argv: job_cli.main(argv, job_server=no_cluster),
                   ["submit", "--stack", "dev", "--print_config", "--", "--dataset", "org/corpus"])
    assert code == cli.OK and "dataset: org/corpus" in capsys.readouterr().out


def test_submit_reads_a_config_file_between_the_stack_and_the_flags_and_prints_the_job_as_one(tmp_path, capsys):
    """The stack's keys, then --config's file over them, then the flags after `--` over both; --print_config writes
    the job's settings as a file that `python -m workload.local --config` replays, without reaching the cluster."""
    def no_cluster(args):
        raise AssertionError("--print_config needs no cluster")

    from workload.run import local

    path = tmp_path / "run.yaml"
    path.write_text("steps: 12\nlearning_rate: 3e-3\nseq_len: 128\n")
    code = cli.run(lambda argv: job_cli.main(argv, job_server=no_cluster),
                   ["submit", "--stack", "dev", "--config", str(path), "--print_config", "--", "--steps", "9"])
    printed = capsys.readouterr().out
    assert code == cli.OK, printed
    replayed = tmp_path / "replayed.yaml"
    replayed.write_text(printed)
    cfg = local.parse_args(["--config", str(replayed)])
    assert (cfg.steps, cfg.learning_rate, cfg.seq_len) == (9, 3e-3, 128), cfg
    assert cfg.run_name.startswith("ray-train-fsdp-llm-submit-"), f"the stack run's name comes along: {cfg.run_name}"

    path.write_text("stepz: 3\n")
    code = cli.run(lambda argv: job_cli.main(argv, job_server=no_cluster),
                   ["submit", "--stack", "dev", "--config", str(path)])
    assert code == cli.USAGE and "unrecognized keys: stepz" in capsys.readouterr().err


def test_a_tracker_named_after_the_stack_brings_its_client():
    from tools.job_submit import stack_job
    from workload.metrics.tracking import TRACKER_REQUIREMENTS

    assert stack_job("dev", "r", [])["pip"] == [], "the dev stack reports to TensorBoard only"
    assert stack_job("dev", "r", ["--report_to", "tensorboard,wandb"])["pip"] == [TRACKER_REQUIREMENTS["wandb"]]


@pytest.mark.parametrize("flags, words", [
    (["--report_to", "tensorboard,wandb"], ("--report_to (stack key trainReportTo)", "WANDB_API_KEY",
                                            "pulumi config set --secret --path 'trainSecretEnv[0]'")),
    (["--push_to_hub", "acme/tuned-7b", "--storage_path", "s3://company-data/runs"],
     ("--push_to_hub (stack key trainPushToHub)", "HF_TOKEN", "trainSecretEnv[0]")),
    (["--model_id", "{weights}"], ("--model_id (stack key trainModelId)", "path on this machine", "s3://")),
])
def test_submit_checks_the_flags_as_the_stack_keys_they_stand_for_before_the_cluster(tmp_path, capsys, flags, words):
    """The flags after `--` go through the preview's checks of the train* keys (a model directory here, the secret a
    tracker or the Hub needs in trainSecretEnv), naming the flag and the key: never a port-forward first."""
    def no_cluster(args):
        raise AssertionError("the flags' mistake must be refused before the cluster is reached")

    (tmp_path / "weights").mkdir()
    (tmp_path / "weights" / "config.json").write_text("{}")
    flags = [flag.format(weights=tmp_path / "weights") for flag in flags]
    code = cli.run(lambda argv: job_cli.main(argv, job_server=no_cluster), ["submit", "--stack", "dev", "--", *flags])
    err = capsys.readouterr().err
    assert code == cli.USAGE and len(err.splitlines()) == 1 and all(word in err for word in words), err


def test_submit_names_the_run_id_flag_as_typed(capsys):
    def no_cluster(args):
        raise AssertionError("a bad --run-id must be refused before the cluster is reached")

    code = cli.run(lambda argv: job_cli.main(argv, job_server=no_cluster),
                   ["submit", "--stack", "dev", "--run-id", "try 3/b", "--print_config"])
    err = capsys.readouterr().err
    assert code == cli.USAGE and err.startswith("error: --run-id 'try 3/b' must be") and "trainRunId" not in err, err


@pytest.mark.parametrize("argv, flag", [
    (["--", "--run_name", "lin_api_" + "Wd3Kp9Qs7Tz1" * 4], "--run_name"),
    (["--", "--wandb_project", "hvb." + "Wd3Kp9Qs7Tz1" * 3], "--wandb_project"),
    (["--run-id", "pul-" + "3c2b1a09" * 5], "--run-id"),
])
def test_submit_refuses_a_vendor_token_in_a_free_text_flag_unquoted(capsys, argv, flag):
    """A token in a free-text flag would sit in the job's entrypoint, plain on Ray's dashboard: refused naming the flag
    (the one shape rule, workload/config/fields.py TOKEN_VALUE), its value never repeated."""
    def no_cluster(args):
        raise AssertionError("a token in a flag must be refused before the cluster is reached")

    code = cli.run(lambda argv: job_cli.main(argv, job_server=no_cluster), ["submit", "--stack", "dev", *argv])
    err = capsys.readouterr().err
    assert code == cli.USAGE and flag in err and "Wd3Kp9Qs7Tz1" not in err and "3c2b1a09" not in err, err


@pytest.mark.parametrize("stack, flags, words", [
    # dev: 2 x g6.12xlarge, 4 GPUs a node, 8 workers; p4d: 8 GPUs a node
    ("dev", ["--ranks_per_node", "8"], ("g6.12xlarge node holds 4 ranks", "allowed: 0 (from Ray) or 1, 2, 4")),
    ("dev", ["--ranks_per_node", "3"], ("must divide the job's 8 workers", "1, 2, 4")),
    ("dev", ["--num_workers", "6", "--ranks_per_node", "4"], ("must divide --num_workers 6",)),  # the flags' own rule
    ("p4d", ["--ranks_per_node", "12"], ("p4d.24xlarge node holds 8 ranks",)),
])
def test_ranks_per_node_past_the_stacks_nodes_is_refused_before_the_cluster(capsys, stack, flags, words):
    """--ranks_per_node has no stack key: the stack's nodes judge it at submit, naming the flag and what it may be."""
    def no_cluster(args):
        raise AssertionError("refused before the cluster is reached")

    code = cli.run(lambda argv: job_cli.main(argv, job_server=no_cluster), ["submit", "--stack", stack, "--", *flags])
    err = capsys.readouterr().err
    assert code == cli.USAGE and err.startswith("error: --ranks_per_node") and len(err.splitlines()) <= 2, err
    assert all(word in err for word in words), err


@pytest.mark.parametrize("value", ["0", "1", "2", "4"])
def test_ranks_per_node_that_divides_the_workers_within_a_node_is_taken(value):
    from infra.preview.instance_facts import known_gpu_facts
    from infra.preview.job_layout import ranks_per_node_problem

    gpu = known_gpu_facts("g6.12xlarge")
    assert ranks_per_node_problem(int(value), 8, gpu) is None
    assert ranks_per_node_problem(int(value), 6, gpu) is None or value == "4", "4 does not divide 6"
