"""trainEnv's NCCL and libfabric settings against what the GPU instance's fabric can do, refused at preview: a value
NCCL or the EFA provider cannot honour on this hardware fails every rank at its first collective (or at start),
after the nodes bill. One rule over the facts of the one instance table (infra/config/settings.py InstanceFacts:
nvlink_sharp, efa_rdma_read):
- NCCL_ALGO and NCCL_PROTO as NCCL parses them (NCCL user guide, Environment Variables: "NCCL_ALGO ... Comma-separated
  list of algorithms (not case sensitive) among: Ring, Tree, CollNetDirect, CollNetChain, NVLS, NVLSTree, PAT. ... To
  specify algorithms to exclude (instead of include), start the list with ^"; since 2.24 a per-collective form
  `allreduce:tree;allgather:ring`; NCCL_PROTO likewise among LL, LL128, Simple). Each collective the job runs (FSDP's
  all-gather and reduce-scatter, all-reduce, and the checkpoints' broadcast) must keep an algorithm that implements it
  and that the instance offers, else NCCL stops with "Error : no algorithm/protocol available for function ...
  NCCL_ALGO was set to ..." (NCCL src/enqueue.cc, topoGetAlgoInfo). Which algorithm implements which collective: NCCL
  src/device/generate.py's algos per collective (AllGather and ReduceScatter: Ring, CollNetDirect, NVLS, PAT;
  AllReduce: Tree, Ring, CollNetDirect, CollNetChain, NVLS, NVLSTree; Broadcast: Ring), so a bare NCCL_ALGO=NVLS fails
  even on H100s. NVLS and NVLSTree need NVLink SHARP (NVSwitch of the third generation: p5 and later); CollNet needs a
  CollNet network plugin (SHARP on InfiniBand), which aws-ofi-nccl over EFA is not; PAT runs with one GPU per node
  only (NCCL 2.23 release notes).
- FI_EFA_USE_DEVICE_RDMA: fi_efa(7), "if EFA device does not support RDMA and FI_EFA_USE_DEVICE_RDMA is set to
  1/true/yes/on, user's application is aborted and a warning message is printed"; libfabric's booleans
  (fi_param_get_bool) are 1/0, true/false, yes/no, on/off.
- NCCL's two transports inside a node, P2P (NVLink/PCIe) and SHM: with both turned off, ranks on one node talk through
  the network plugin (their channels go "via NET/..."), so a job that expects intra-node transport fails its check.
  NCCL src/graph/paths.cc ncclGetLevel: P2P is off when NCCL_P2P_DISABLE parses (strtol, base 0) to 1, or else
  NCCL_P2P_LEVEL is exactly "LOC" or a number whose old level maps to LOC (0); src/transport/shm.cc shmCanConnect:
  SHM is off when NCCL_SHM_DISABLE is 1 (NCCL_PARAM: strtoll, base 0, the whole value).
Standard library only."""
from __future__ import annotations

import re
from typing import Mapping

from infra.config import InstanceFacts

KEY = "trainEnv"
ALGORITHMS = {name.lower(): name for name in ("Ring", "Tree", "CollNetDirect", "CollNetChain", "NVLS", "NVLSTree",
                                               "PAT")}
ALGORITHM_ALIASES = {"collnet": ("collnetdirect", "collnetchain")}  # NCCL before 2.14, still parsed as both
PROTOCOLS = {name.lower(): name for name in ("LL", "LL128", "Simple")}
# The collectives the job runs, and the algorithms that implement each (NCCL src/device/generate.py).
JOB_COLLECTIVES = {
    "allgather": ("ring", "collnetdirect", "nvls", "pat"),
    "reducescatter": ("ring", "collnetdirect", "nvls", "pat"),
    "allreduce": ("tree", "ring", "collnetdirect", "collnetchain", "nvls", "nvlstree"),
    # Distributed checkpointing's planning on the default (NCCL) group: torch/distributed/checkpoint/utils.py
    # _DistWrapper.broadcast_object, dist.broadcast_object_list. Broadcast is Ring's alone.
    "broadcast": ("ring",),
}
_NEEDS = {"nvls": "NVLink SHARP (third-generation NVSwitch: p5, p5e, p5en, p6)",
          "nvlstree": "NVLink SHARP (third-generation NVSwitch: p5, p5e, p5en, p6)",
          "collnetdirect": "a CollNet network plugin (SHARP on InfiniBand; EFA has none)",
          "collnetchain": "a CollNet network plugin (SHARP on InfiniBand; EFA has none)",
          "pat": "one GPU per node"}
_TRUE, _FALSE = ("1", "true", "yes", "on"), ("0", "false", "no", "off")
# A value is quoted only when it is made of these words alone (trainEnv's values may hold anything a user pasted).
_KNOWN_WORDS = {*ALGORITHMS, *ALGORITHM_ALIASES, *PROTOCOLS, *JOB_COLLECTIVES, "reduce", "sendrecv", *_TRUE, *_FALSE}


def offered(gpu: InstanceFacts) -> set[str]:
    """The algorithms NCCL can run on `gpu`'s instance type."""
    algorithms = {"ring", "tree"}
    if gpu.nvlink_sharp:
        algorithms |= {"nvls", "nvlstree"}
    if gpu.gpus == 1:
        algorithms.add("pat")
    return algorithms


def _shown(name: str, value: str) -> str:
    shown = len(value) <= 80 and all(word.lower() in _KNOWN_WORDS for word in re.split(r"[,;:^ ]+", value) if word)
    return f"{name}={value}" if shown else f"{name} (its value is not shown)"


def _parts(value: str) -> list[tuple[str | None, str]]:
    """`allreduce:tree;allgather:ring` as [(collective, list)], a plain list as [(None, list)]."""
    parts = []
    for part in value.split(";"):
        collective, colon, names = part.partition(":")
        parts.append((collective.strip().lower(), names) if colon else (None, part))
    return parts


def _chosen(text: str, known: dict[str, str], aliases: Mapping[str, tuple[str, ...]]) -> tuple[set[str], list[str]]:
    """The names a list allows (its '^' form: all but those), and the unknown names in it."""
    text = text.strip()
    exclude = text.startswith("^")
    names = [name.strip().lower() for name in text.lstrip("^").split(",") if name.strip()]
    unknown = [name for name in names if name not in known and name not in aliases]
    listed = {expanded for name in names for expanded in aliases.get(name, (name,))}
    return (set(known) - listed if exclude else listed & set(known)), unknown


def _strtol(value: str) -> int:
    """`value` as C's strtol(value, NULL, 0) reads it, the way NCCL reads its numeric settings: leading space, a
    sign, then the longest run of digits of the base its prefix names (0x hex, 0 octal, else decimal), the rest
    ignored; 0 where no digit comes."""
    match = re.match(r"\s*([+-]?)(0[xX][0-9a-fA-F]+|0[0-7]*|[1-9][0-9]*)", value)
    if match is None:
        return 0
    digits = match.group(2)
    base = 16 if digits[:2].lower() == "0x" else 8 if digits.startswith("0") else 10
    number = int(digits, base)
    return -number if match.group(1) == "-" else number


def intra_node_transports_off(env: Mapping[str, str]) -> str | None:
    """The trainEnv settings that turn off both of NCCL's transports inside a node (P2P and SHM), said as words; None
    while either is left on."""
    if "NCCL_P2P_DISABLE" in env and _strtol(env["NCCL_P2P_DISABLE"]) == 1:
        p2p = "NCCL_P2P_DISABLE=1"
    elif (level := env.get("NCCL_P2P_LEVEL", "")) == "LOC" or (level[:1].isdigit() and _strtol(level) == 0):
        p2p = "NCCL_P2P_LEVEL=LOC" if level == "LOC" else "NCCL_P2P_LEVEL (a number NCCL reads as level 0, LOC)"
    else:
        return None
    if _strtol(env.get("NCCL_SHM_DISABLE", "")) != 1:
        return None
    return f"{p2p} and NCCL_SHM_DISABLE=1"


def problem(env: Mapping[str, str], gpu: InstanceFacts) -> str | None:
    """The first of trainEnv's fabric settings `gpu`'s instance type cannot honour, said as a refusal; None if none."""
    where = f"{gpu.instance_type} ({gpu.gpus} x {gpu.gpu_name or 'GPU'})"
    if (value := env.get("NCCL_ALGO", "")).strip():
        for collective, text in _parts(value):
            allowed, unknown = _chosen(text, ALGORITHMS, ALGORITHM_ALIASES)
            if unknown or (collective is not None and collective not in (*JOB_COLLECTIVES, "reduce", "sendrecv")):
                return (f"{_shown('NCCL_ALGO', value)}: not NCCL's algorithms; NCCL takes a comma list (not case "
                        f"sensitive, ^ to exclude) of {', '.join(ALGORITHMS.values())}")
            for name, implementing in JOB_COLLECTIVES.items():
                if collective not in (None, name):
                    continue
                if not allowed & set(implementing) & offered(gpu):
                    needs = "".join(sorted(f"; {ALGORITHMS[a]} needs {_NEEDS[a]}" for a in allowed
                                           if a in _NEEDS and a not in offered(gpu)))
                    return (f"{_shown('NCCL_ALGO', value)} leaves the job's {name} no algorithm {where} can run "
                            f"({name}: {', '.join(ALGORITHMS[a] for a in implementing)}{needs}), so NCCL fails the "
                            "first one (\"no algorithm/protocol available\"); unset it, or allow Ring")
    if (value := env.get("NCCL_PROTO", "")).strip():
        for _collective, text in _parts(value):
            allowed, unknown = _chosen(text, PROTOCOLS, {})
            if unknown or not allowed:
                what = "not NCCL protocols" if unknown else "excludes every protocol"
                return (f"{_shown('NCCL_PROTO', value)}: {what}"
                        f"; NCCL takes a comma list (^ to exclude) of {', '.join(PROTOCOLS.values())}, or unset it")
    if value := env.get("FI_EFA_USE_DEVICE_RDMA", "").strip():
        if value.lower() not in (*_TRUE, *_FALSE):
            return (f"{_shown('FI_EFA_USE_DEVICE_RDMA', value)} is not one of libfabric's booleans: set 1 or 0 "
                    "(true/false, yes/no, on/off), or unset it")
        if value.lower() in _TRUE and not gpu.efa_rdma_read:
            return (f"{_shown('FI_EFA_USE_DEVICE_RDMA', value)}: {gpu.instance_type}'s EFA has no RDMA read, and "
                    "the EFA provider aborts every rank when it is set true on such a device (fi_efa(7)); unset it "
                    "(the provider uses RDMA where the device has it)")
    return None


def check(env: Mapping[str, str], gpu: InstanceFacts) -> None:
    if (why := problem(env, gpu)) is not None:
        raise ValueError(f"config key {KEY!r}: {why}")
