"""The Jobs API path against a real `ray start --head` with token authentication on (workload.local's cluster):
a tiny training job, created as `pulumi up` creates it (the TrainingJob provider), succeeds and returns its summary
and the resource's outputs; a failing job, a timeout and a wrong token fail clearly.

While that job runs (issue 24):
- the node's metrics endpoint, scraped as the shipped PodMonitor scrapes a Ray pod (its path, plain HTTP), serves
  the Prometheus exposition format with Ray's node metrics and the job's own tokens/s and step time;
- the idle stop's decision, from the real job server's list_jobs during and after the job, and its scaling call
  against moto's EKS (boto3, the same calls the CronJob makes), which leaves the node group at 0 nodes.
Locally the metrics port is a free one instead of RAY_METRICS_PORT (8080 may be taken here); on the cluster KubeRay's
`metrics` container port maps the PodMonitor's port name to it the same way."""
from __future__ import annotations

import asyncio
import concurrent.futures
import os
import socket
import time
import urllib.request
from datetime import datetime, timedelta, timezone

import boto3
import pytest
from prometheus_client.parser import text_string_to_metric_families
from ray.job_submission import JobStatus

from infra.job import job_config, ray_job
from infra.kubernetes import idle_check, monitoring
from infra.kubernetes.idle_stop import SCALING_ACTIONS
from tests.runs.test_ray_job import Connector
from tests.runs.test_ray_job import props as job_props
from tests.support import listening_sockets
from workload.metrics import live as live_metrics
from workload.run import local, submit

# Ray Train's print patch stays at its default (on), as on a real cluster, so the test sees the progress lines a
# real job log gets.
# Ray Train as in test_workload_train, but keeping its print patch: this job's tests read what it prints.
FAST_RAY_TRAIN = {"RAY_TRAIN_HEALTH_CHECK_INTERVAL_S": "0.1", "RAY_TRAIN_ENABLE_PREEMPTION_WATCHER": "0",
                  "RAY_DEDUP_LOGS": "0"}
TINY = ["--model_config", "tiny", "--steps", "3", "--batch_size", "2", "--seq_len", "32"]
# The module's one training run: long enough (a few seconds) for the scrapes to see it while it runs.
STEPS = 60
SCRAPED_JOB = [*TINY, "--steps", str(STEPS), "--run_name", "scraped"]


# Ray reports metrics every 10 s by default; this cluster every 0.2 s, so a short run shows up while it runs.
FAST_METRICS = {"RAY_metrics_report_interval_ms": "200"}
METRICS_PORT = {}


@pytest.fixture(scope="module")
def head():
    """One cluster for the module. It is left the way Ctrl-C would leave it, and must then be down."""
    METRICS_PORT["port"] = local.free_port()
    with pytest.MonkeyPatch.context() as patch:
        for name, value in FAST_METRICS.items():
            patch.setenv(name, value)
        cluster = local.local_cluster(metrics_export_port=METRICS_PORT["port"])
        address, token = cluster.__enter__()
    yield address, token
    cluster.__exit__(KeyboardInterrupt, KeyboardInterrupt(), None)
    port = int(address.rsplit(":", 1)[1])
    with socket.socket() as probe:
        assert probe.connect_ex(("127.0.0.1", port)) != 0, f"job server on port {port} must be down after Ctrl-C"


def test_job_runs_through_the_jobs_api_and_returns_its_summary(observed_run):
    summary, lines, token = observed_run["summary"], observed_run["lines"], observed_run["token"]
    status = observed_run["created"].outs["status"]
    assert status == "SUCCEEDED", f"tiny job: expected SUCCEEDED, got {status}"
    assert (summary["steps"], summary["world_size"], summary["device"]) == (STEPS, 2, "cpu"), (
        f"summary: expected {STEPS} steps on 2 cpu workers, got {summary}"
    )
    assert set(summary) == {"world_size", "device", "steps", "initial_loss", "final_loss", "eval_loss",
                                   "effective_batch", "tokens_seen", "tokens_per_s", "mfu", "start_step",
                                   "diverged_at_step", "checkpoint", "model", "tensorboard", "nccl_logs", "sharding",
                                   "fabric", "memory_plan", "examples"}, f"summary keys: got {sorted(summary)}"
    assert summary["memory_plan"] is None, "CPU workers plan no GPU memory (the host's is theirs)"
    assert summary["examples"] is None, "random tokens: no supervised examples to count"
    assert summary["sharding"]["sharding"] == "full" and "one node" in summary["sharding"]["reason"], \
        f"2 CPU workers on one node: full sharding, and why: {summary['sharding']}"
    assert summary["fabric"]["ranks"] == 2 and summary["fabric"]["bus_gbytes_per_s"] > 0, \
        f"the fabric check runs by default, on gloo here: {summary['fabric']}"
    for step in range(1, STEPS + 1):
        count = sum(f"step {step}/{STEPS} loss" in line for line in lines)
        assert count == 1, f"rank 0's progress line for step {step} must stream through on_log once, seen {count}"
    assert token not in observed_run["logs"] and not any(token in line for line in lines), "the auth token must never be logged"


def test_the_job_resource_s_create_reports_the_run_and_an_update_judges_it_again(observed_run):
    """The TrainingJob resource's create (what `pulumi up` runs) on the module's job: its id and outputs; then an
    update against another transport expectation refuses, and one that changes nothing of the job keeps its
    results."""
    created, inputs, provider = observed_run["created"], observed_run["inputs"], observed_run["provider"]
    outs = created.outs
    assert observed_run["connector"].calls == [True], "create must run the preflight through the connector once"
    assert created.id == outs["job_id"] == inputs["submission_id"], \
        f"the resource id is the run's derived Ray submission id, got {created.id}"
    assert outs["status"] == "SUCCEEDED", f"job status should be SUCCEEDED, got {outs['status']}"
    assert isinstance(outs["final_loss"], float) and outs["final_loss"] > 0, f"final_loss: {outs['final_loss']}"
    assert outs["tokens_per_s"] > 0 and outs["world_size"] == 2, f"tokens_per_s / world_size: {outs}"
    # Gloo on CPU writes no NCCL lines: every rank's debug file is empty, so there is no verdict to give.
    assert outs["verdicts"] == {}, f"a CPU job has no NCCL transport, got {outs['verdicts']}"
    assert any(f"step {STEPS}/{STEPS}" in line for line in observed_run["lines"]), \
        "the job's log lines must be streamed while it runs"
    assert outs["kubeconfig"] == inputs["kubeconfig"], "delete needs the kubeconfig kept in the outputs"
    assert outs["sharding"]["sharding"] == "full" and outs["fabric"]["ranks"] == 2, \
        f"the job's sharding choice and fabric check are outputs: {outs['sharding']}, {outs['fabric']}"
    assert outs["model"].endswith(f"/model_{STEPS:06d}") and os.path.isfile(os.path.join(outs["model"], "config.json")), \
        f"the model the job exported is an output (jobModelPath): {outs['model']}"
    assert os.listdir(outs["tensorboard"]) and outs["eval_loss"] is None, \
        f"its event files are an output; no evaluation set, no eval loss: {outs['tensorboard']}, {outs['eval_loss']}"

    # The same results judged against expect=efa: the update refuses, naming the fix.
    with pytest.raises(ray_job.TrainingJobError, match="no NCCL transport lines.*change trainRunId"):
        provider.update(created.id, outs, {**inputs, "expect_transport": "efa"})
    updated = provider.update(created.id, outs, {**outs, "timeout_s": 60.0})
    assert updated.outs["job_id"] == created.id and updated.outs["timeout_s"] == 60.0, \
        "an in-place update keeps the job's results and takes the new inputs"


@pytest.mark.skipif(not os.path.isdir("/proc/net"), reason="reads the listening sockets from Linux's /proc")
def test_every_listener_of_the_local_cluster_is_on_loopback(head, observed_run):
    """Every TCP socket the cluster's processes listen on (GCS, raylet, the agents and their metrics, the client
    server, the dashboard, and the workers of the job just run) is bound to loopback, as `ss -ltnp` would show.
    The cluster's processes are those that inherited its own token file's path. (Not seen here: while training runs,
    rank 0's torch TCPStore, the process group's rendezvous, which torch binds to every interface.)"""
    address, _ = head
    server = listening_sockets.listener_of_port(int(address.rsplit(":", 1)[1]))
    entry = listening_sockets.environment_entry(server, "RAY_AUTH_TOKEN_PATH")
    # The job server answers before the raylet has opened every listener (its job agent registers later too): look
    # again until the GCS and the raylet are both there, for a bounded while.
    deadline = time.monotonic() + 30
    while True:
        found = listening_sockets.listeners(listening_sockets.processes_with_env(entry))
        names = {listener.process.split()[0] for listener in found}
        if time.monotonic() > deadline or (any("gcs_server" in name for name in names)
                                           and any("raylet" in name for name in names)):
            break
        time.sleep(0.5)
    assert any("gcs_server" in name for name in names) and any("raylet" in name for name in names), \
        f"the GCS and the raylet must be among the cluster's listeners: {sorted(names)}"
    exposed = [listener for listener in found if not listener.loopback]
    assert not exposed, f"listening beyond loopback: {exposed}"


def test_failing_job_raises_with_the_tail_of_its_log(head):
    address, token = head
    callers_loop = asyncio.new_event_loop()
    asyncio.set_event_loop(callers_loop)
    try:
        with pytest.raises(submit.JobFailedError) as failure:
            submit.submit_training_job(address, [*TINY, "--seq_len", "100000"], token=token,
                                       on_log=lambda line: None, timeout_s=120)
        assert asyncio.get_event_loop() is callers_loop, "submit_training_job must leave the caller's event loop"
    finally:
        asyncio.set_event_loop(None)
        callers_loop.close()
    assert failure.value.status == "FAILED", f"expected status FAILED, got {failure.value.status}"
    assert "--seq_len" in failure.value.log_tail, "the log tail must show the driver's error naming --seq_len"
    assert failure.value.log_tail in str(failure.value), "the exception message must include the log tail"


@pytest.mark.parametrize("token", ["not-the-cluster-token", None])
def test_wrong_or_missing_token_is_refused_clearly(head, token):
    address, _ = head
    with pytest.raises(submit.JobAuthenticationError, match="refused") as refusal:
        submit.submit_training_job(address, TINY, token=token, on_log=lambda line: None)
    assert "not-the-cluster-token" not in str(refusal.value), "the refusal must not echo the token"


def test_timeout_stops_the_job(head):
    address, token = head
    with pytest.raises(submit.JobFailedError, match="timeout") as failure:
        submit.submit_training_job(address, TINY, token=token, on_log=lambda line: None, timeout_s=2)
    client = submit.connect(address, token)
    deadline = time.monotonic() + 60
    while client.get_job_status(failure.value.job_id) != JobStatus.STOPPED and time.monotonic() < deadline:
        time.sleep(0.5)
    assert client.get_job_status(failure.value.job_id) == JobStatus.STOPPED, "a timed-out job must be stopped"


# ---- issue 24: the metrics a Ray node serves, and the idle stop's decision, on this cluster ----------------------

RAY_NODE_METRICS = ("ray_node_cpu_utilization", "ray_node_mem_used")
IDLE_MINUTES = 30


def scrape(url: str) -> dict[str, list]:
    """One scrape: metric family name -> its samples, parsed from the exposition format."""
    with urllib.request.urlopen(url, timeout=5) as response:
        assert response.headers.get_content_type() == "text/plain", response.headers
        text = response.read().decode()
    return {family.name: family.samples for family in text_string_to_metric_families(text)}


def _wait_for_metrics(url: str) -> None:
    """The node's dashboard agent serves its metrics, node metrics among them: it comes up after the job server, and
    reports the node's figures every few seconds from then on."""
    deadline = time.monotonic() + 120
    while True:
        try:
            if RAY_NODE_METRICS[0] in scrape(url):
                return
        except OSError:
            pass
        assert time.monotonic() < deadline, f"{url} served no {RAY_NODE_METRICS[0]} within 120 s"
        time.sleep(0.5)


@pytest.fixture(scope="module")
def observed_run(head, tmp_path_factory):
    """The module's training job, created as `pulumi up` creates it: the TrainingJob provider's create
    (infra/job/ray_job.py) through tests/runs/test_ray_job.py's connector (the head through a LocalForward, as the
    Kubernetes port-forward gives it), which calls the same start_job and wait_for_end as the local run's
    submit_training_job, its log lines streamed, in a thread. Meanwhile, once the node serves its metrics, they are
    scraped and the job list read every 0.2 s; then the list once the job has ended, and the job's whole log from the
    job server."""
    address, token = head
    endpoint = monitoring.ray_pod_monitor(namespace="ray", cluster_name="ray-train")["spec"]["podMetricsEndpoints"][0]
    url = f"http://{local.LOOPBACK}:{METRICS_PORT['port']}{endpoint['path']}"
    client = submit.connect(address, token)
    lines: list[str] = []
    connector = Connector(address, token)
    provider = ray_job.TrainingJobProvider(connect=connector, on_log=lines.append)
    # Checkpointed (a storage path), so the job exports its model and the resource has it as an output.
    inputs = job_props(train_args=[*SCRAPED_JOB, "--storage_path", str(tmp_path_factory.mktemp("scraped"))],
                       env_vars={"NCCL_DEBUG_FILE": job_config.NCCL_DEBUG_FILE, **FAST_RAY_TRAIN})
    scraped, running_lists = {}, []  # every metric family seen while the job ran, as last scraped
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        job = pool.submit(provider.create, inputs)
        # The node's metrics come up while the job's driver and workers start (tens of seconds): scraped from then on.
        _wait_for_metrics(url)
        while not job.done():
            running_lists.append(client.list_jobs())
            scraped.update(scrape(url))
            concurrent.futures.wait([job], timeout=0.2)
        created = job.result()
    logs = client.get_job_logs(created.id)
    return {"created": created, "inputs": inputs, "connector": connector, "provider": provider, "logs": logs,
            "summary": submit.parse_summary(logs), "lines": lines, "token": token, "scraped": scraped,
            "running_lists": running_lists, "ended_list": client.list_jobs()}


def test_the_scrape_finds_the_jobs_tokens_per_second_and_the_ray_node_metrics(observed_run):
    assert observed_run["created"].outs["status"] == "SUCCEEDED", observed_run["logs"][-2000:]
    families = observed_run["scraped"]
    assert f"ray_{live_metrics.TOKENS_PER_SECOND}" in families, (
        f"ray_{live_metrics.TOKENS_PER_SECOND} never appeared on the metrics endpoint while the job ran")
    for name in RAY_NODE_METRICS:
        assert families.get(name), f"Ray's node metric {name} must be on the endpoint; got {sorted(families)[:40]}"
    for name in (live_metrics.TOKENS_PER_SECOND, live_metrics.STEP_TIME_SECONDS):
        samples = families[f"ray_{name}"]
        assert [s.labels.get("run") for s in samples] == ["scraped"], f"one series per run (rank 0 only): {samples}"
        assert samples[0].value > 0, f"{name} must be a measured, positive value: {samples}"
    # The training dashboard's panels query exactly these series.
    queries = " ".join(expression for _, expression, _, _ in monitoring.TRAINING_PANELS)
    assert f"ray_{live_metrics.TOKENS_PER_SECOND}" in queries and f"ray_{live_metrics.STEP_TIME_SECONDS}" in queries


def _eks_with_gpu_nodes(node_count: int = 2):
    eks = boto3.client("eks", region_name="us-east-1")
    iam = boto3.client("iam", region_name="us-east-1")
    role = iam.create_role(RoleName="eks", AssumeRolePolicyDocument="{}")["Role"]["Arn"]
    eks.create_cluster(name="ray-train", roleArn=role, resourcesVpcConfig={"subnetIds": ["subnet-1"]})
    eks.create_nodegroup(clusterName="ray-train", nodegroupName="gpu", nodeRole=role, subnets=["subnet-1"],
                         scalingConfig={"minSize": 0, "maxSize": node_count, "desiredSize": node_count})
    return eks


def test_idle_decision_from_the_real_job_server_and_the_stop_against_moto(observed_run, aws_env):
    eks = _eks_with_gpu_nodes()
    nodegroup = eks.describe_nodegroup(clusterName="ray-train", nodegroupName="gpu")["nodegroup"]
    calls: list[str] = []
    eks.meta.events.register("before-call.eks.*", lambda model, **_: calls.append(model.name))
    running = [jobs for jobs in observed_run["running_lists"]
               if any(job.status.value == "RUNNING" for job in jobs)]
    assert running, "the job list must have shown the job RUNNING at least once"
    during = idle_check.decide(running[-1], nodegroup, now=nodegroup["createdAt"] + timedelta(days=1),
                               idle_minutes=IDLE_MINUTES)
    job_id = observed_run["created"].id
    assert not during.stop and job_id in during.reason, f"a running job keeps the nodes: {during}"

    (ended,) = [job for job in observed_run["ended_list"] if job.submission_id == job_id]
    # Idle since the latest of the job's end and the group's last change (moto creates the group after this run's job
    # ended, and sets modifiedAt a moment after createdAt).
    end = max(nodegroup["createdAt"], nodegroup.get("modifiedAt", nodegroup["createdAt"]),
              datetime.fromtimestamp(ended.end_time / 1000, timezone.utc))
    almost = idle_check.check_once(observed_run["ended_list"], eks, cluster="ray-train", nodegroup_name="gpu",
                                   idle_minutes=IDLE_MINUTES, now=end + timedelta(minutes=IDLE_MINUTES - 1))
    assert not almost.stop and almost.idle_since == end, f"{IDLE_MINUTES - 1} minutes after the job: keep: {almost}"
    assert calls == ["DescribeNodegroup"], f"no scaling call before the idle period is over: {calls}"

    stopped = idle_check.check_once(observed_run["ended_list"], eks, cluster="ray-train", nodegroup_name="gpu",
                                    idle_minutes=IDLE_MINUTES, now=end + timedelta(minutes=IDLE_MINUTES + 1))
    assert stopped.stop, f"{IDLE_MINUTES + 1} minutes after the job ended the nodes must stop: {stopped}"
    scaling = eks.describe_nodegroup(clusterName="ray-train", nodegroupName="gpu")["nodegroup"]["scalingConfig"]
    # EKS refuses minSize above desiredSize (moto does not check it): the call must keep min <= desired <= max.
    assert scaling == {"minSize": 0, "maxSize": 2, "desiredSize": 0}, scaling
    assert set(calls) <= {action.split(":")[1] for action in SCALING_ACTIONS}, (
        f"every call the check makes must be allowed by its IAM policy: {calls}")
    assert not idle_check.check_once([], eks, cluster="ray-train", nodegroup_name="gpu", idle_minutes=IDLE_MINUTES,
                                     now=end + timedelta(days=1)).stop, "a stopped group is left alone"

