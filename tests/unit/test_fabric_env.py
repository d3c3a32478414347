"""trainEnv's NCCL and libfabric settings against the instance's fabric (infra/preview/fabric_env.py): NCCL_ALGO and
NCCL_PROTO as NCCL parses them (any case, comma lists, ^ exclusion, the per-collective form), each collective the job
runs keeping an algorithm the instance offers, and FI_EFA_USE_DEVICE_RDMA true only where EFA has RDMA read."""
from __future__ import annotations

import pytest

from infra.preview import fabric_env
from tests.support.instance_facts import INSTANCE_FACTS

G6, G6E, P4D, P5 = (INSTANCE_FACTS[t] for t in ("g6.12xlarge", "g6e.12xlarge", "p4d.24xlarge", "p5.48xlarge"))


@pytest.mark.parametrize("gpu, env, words", [
    (G6E, {"NCCL_ALGO": "nvlstree"}, "NVLSTree needs NVLink SHARP"),
    (P4D, {"NCCL_ALGO": "NVLS,NVLSTree"}, "leaves the job's allgather no algorithm p4d.24xlarge"),
    (P5, {"NCCL_ALGO": "CollNetDirect"}, "CollNetDirect needs a CollNet network plugin"),
    (G6E, {"NCCL_ALGO": "^ring,collnet,nvls"}, "allgather no algorithm"),  # only Tree left: no all-gather in it
    (P5, {"NCCL_ALGO": "Tree"}, "allgather no algorithm"),
    (G6E, {"NCCL_ALGO": "allreduce:ring;allgather:nvls"}, "allgather no algorithm"),
    (G6E, {"NCCL_ALGO": "Rings"}, "not NCCL's algorithms"),
    (P5, {"NCCL_ALGO": "NVLS"}, "leaves the job's broadcast no algorithm"),  # NVLS has no Broadcast
    (P5, {"NCCL_ALGO": "broadcast:^ring"}, "broadcast no algorithm"),
    (P5, {"NCCL_PROTO": "LL256"}, "not NCCL protocols"),
    (G6E, {"NCCL_PROTO": "^ll,ll128,SIMPLE"}, "excludes every protocol"),
    (G6E, {"FI_EFA_USE_DEVICE_RDMA": "Yes"}, "g6e.12xlarge's EFA has no RDMA read"),
    (P4D, {"FI_EFA_USE_DEVICE_RDMA": "enable"}, "not one of libfabric's booleans"),
])
def test_a_setting_the_fabric_cannot_honour_is_refused(gpu, env, words):
    with pytest.raises(ValueError) as refused:
        fabric_env.check(env, gpu)
    message = str(refused.value)
    assert message.startswith("config key 'trainEnv': ") and words in message, (
        f"{env} on {gpu.instance_type}: {message}")
    assert next(iter(env)) in message and "\n" not in message, message


@pytest.mark.parametrize("gpu, env", [
    (P5, {"NCCL_ALGO": "allgather:nvls;reducescatter:NVLS;allreduce:nvlstree"}), (P5, {"NCCL_ALGO": "NVLSTree,Ring"}),
    (G6E, {"NCCL_ALGO": "ring"}),
    (G6E, {"NCCL_ALGO": "^NVLS,NVLSTree"}), (P4D, {"NCCL_ALGO": "Ring,Tree"}),
    (G6E, {"NCCL_ALGO": "allreduce:tree;allgather:ring;reducescatter:ring"}),
    (P4D, {"NCCL_PROTO": "^LL128"}), (G6E, {"NCCL_PROTO": "Simple,LL"}),
    (P4D, {"FI_EFA_USE_DEVICE_RDMA": "1"}), (P5, {"FI_EFA_USE_DEVICE_RDMA": "true"}),
    (G6E, {"FI_EFA_USE_DEVICE_RDMA": "0"}), (G6, {"FI_EFA_USE_DEVICE_RDMA": "off"}), (G6, {}),
])
def test_a_setting_the_fabric_honours_passes(gpu, env):
    assert fabric_env.problem(env, gpu) is None, f"{env} on {gpu.instance_type}"


def test_the_facts_come_from_the_instance_table():
    assert [g.nvlink_sharp for g in (G6, G6E, P4D, P5)] == [False, False, False, True]
    assert [g.efa_rdma_read for g in (G6, G6E, P4D, P5)] == [False, False, True, True]


def test_a_value_shaped_like_a_token_is_not_quoted():
    for secret in ("hf_" + "Qx7" * 12, "Qx7Lp2Zr9" * 3):
        message = fabric_env.problem({"NCCL_ALGO": secret}, P5)
        assert message is not None and secret not in message and "NCCL_ALGO" in message, message


@pytest.mark.parametrize("env, off", [
    ({"NCCL_P2P_DISABLE": "1", "NCCL_SHM_DISABLE": "1"}, "NCCL_P2P_DISABLE=1"),
    ({"NCCL_P2P_DISABLE": "0x1", "NCCL_SHM_DISABLE": "01"}, "NCCL_P2P_DISABLE=1"),  # strtol, base 0
    ({"NCCL_P2P_DISABLE": " 1 ", "NCCL_SHM_DISABLE": "1"}, "NCCL_P2P_DISABLE=1"),  # leading space, trailing text
    ({"NCCL_P2P_LEVEL": "LOC", "NCCL_SHM_DISABLE": "1"}, "NCCL_P2P_LEVEL=LOC"),
    ({"NCCL_P2P_LEVEL": "0", "NCCL_SHM_DISABLE": "1"}, "level 0"),  # NCCL's old numbering: 0 is LOC
    ({"NCCL_P2P_DISABLE": "2", "NCCL_P2P_LEVEL": "LOC", "NCCL_SHM_DISABLE": "1"}, "NCCL_P2P_LEVEL=LOC"),
])
def test_both_transports_inside_a_node_turned_off_are_named(env, off):
    assert off in fabric_env.intra_node_transports_off(env)


@pytest.mark.parametrize("env", [
    {"NCCL_P2P_DISABLE": "1"},  # SHM still carries the node's traffic
    {"NCCL_SHM_DISABLE": "1"},
    {"NCCL_P2P_DISABLE": "2", "NCCL_SHM_DISABLE": "1"},  # NCCL turns P2P off only for exactly 1
    {"NCCL_P2P_LEVEL": "loc", "NCCL_SHM_DISABLE": "1"},  # the level's names are compared case-sensitively
    {"NCCL_P2P_LEVEL": "NVL", "NCCL_SHM_DISABLE": "1"},
    {"NCCL_P2P_LEVEL": "1", "NCCL_SHM_DISABLE": "1"},  # old level 1 is PIX
    {"NCCL_P2P_DISABLE": "1", "NCCL_SHM_DISABLE": "0"},
    {"NCCL_P2P_DISABLE": "1", "NCCL_SHM_DISABLE": "yes"},  # not a number: strtoll reads 0
])
def test_a_transport_left_on_inside_a_node_passes(env):
    assert fabric_env.intra_node_transports_off(env) is None
