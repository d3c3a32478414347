"""The tests' Ray clusters: the Ray Train settings of a run on this machine, and the two-node cluster that
tests/conftest.py's `ray_cluster` fixture starts once for each module that asks for it (ray.cluster_utils.Cluster: a
real GCS and two real raylets of one CPU each, so a run's two workers are on different nodes, as ranks are on GPU
nodes, and one node can be taken away under its worker)."""
from __future__ import annotations

import pytest
import ray
from ray.cluster_utils import Cluster

# Ray Train as the tests' runs need it: no preemption watcher (nothing on this machine is preempted, as in
# workload.local's own runs: one actor process fewer to start per attempt), the controller polling its workers often.
FAST_RAY_TRAIN = {
    "RAY_TRAIN_HEALTH_CHECK_INTERVAL_S": "0.1",
    "RAY_TRAIN_ENABLE_PREEMPTION_WATCHER": "0",
    "RAY_TRAIN_ENABLE_PRINT_PATCH": "0",
    "RAY_DEDUP_LOGS": "0",
    # The reference run reports to W&B too: its files only, no network.
    "WANDB_MODE": "offline",
}
# The GCS marks a node dead after 3 failed health checks a second apart (Ray's defaults: 5 checks 3 s apart), and the
# workers restarted after a node is lost wait for that: only then is the lost node's share of the run's placement
# group given back. A killed raylet fails each check at once (connection refused); a live one, to fail 3 in a row,
# must not answer for 5 s each time.
FAST_NODE_DEATH = {"health_check_period_ms": 1000, "health_check_timeout_ms": 5000, "health_check_failure_threshold": 3}


def two_node_cluster():
    """Yields the cluster, connected to from this process; shuts it down after."""
    patch = pytest.MonkeyPatch()
    for name, value in FAST_RAY_TRAIN.items():
        patch.setenv(name, value)
    # ray.init turns token auth on (Ray 2.60's default) by writing RAY_AUTH_MODE into this process's environment;
    # recording it here lets undo() give the tests that follow the environment they had.
    patch.delenv("RAY_AUTH_MODE", raising=False)
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False,
                                                            "_system_config": FAST_NODE_DEATH})
    cluster.add_node(num_cpus=1)
    # RAY_ADDRESS for the job's processes: Ray's helpers that look for "the" cluster (Ray Train's placement-group
    # cleaner among them) otherwise take the newest on this machine, which may be another test worker's.
    ray.init(address=cluster.address, log_to_driver=True, runtime_env={"env_vars": {"RAY_ADDRESS": cluster.address}})
    yield cluster
    ray.shutdown()
    cluster.shutdown()
    patch.undo()
