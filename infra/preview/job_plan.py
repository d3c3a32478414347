"""Whether the training job can run, at preview: its memory plan on the stack's GPUs and the layout it would choose,
its data and chat template, its shape against the cluster, and the transport and bandwidth it expects."""
from __future__ import annotations

import math
import re
from typing import Any

from infra.config import AwsIdentity, InstanceFacts, StackConfig, config_error
from infra.config.schema import warn
from infra.job import job_config
from infra.preview import (
    chat_template,
    checkpoint_cost,
    data_cost,
    dataset_records,
    fabric_env,
    hub_access,
    instance_facts,
    job_layout,
    model_config,
)
from workload.config import is_local_dataset
from workload.data import tokenizer_size
from workload.model import adapters, architectures, compatibility, memory, memory_plan, model_source, structure
from workload.model import layout as layout_rules
from workload.model.layout import ASSUMED_MFU, step_compute_seconds


def check_job(cfg: StackConfig, gpu: InstanceFacts, *, identity: AwsIdentity | None = None, region: str | None = None
              ) -> tuple[memory_plan.MemoryPlan | None, dict | None, dict | None, dict | None]:
    """_check_job, each Hub file it reads asked for once however many checks read it (model_source.reads_once)."""
    with model_source.reads_once():
        return _check_job(cfg, gpu, identity=identity, region=region)


def _check_job(cfg: StackConfig, gpu: InstanceFacts, *, identity: AwsIdentity | None = None, region: str | None = None
               ) -> tuple[memory_plan.MemoryPlan | None, dict | None, dict | None, dict | None]:
    """A job the cluster can run: its data, its workers, its shape against the model and the GPUs' memory (the
    memory plan it returns, the layout the job would choose with it: job_layout.predict, and what a checkpoint of it
    costs: checkpoint_cost.plan, with a warning when saves would always be in flight), its data stage's cost
    (data_cost.plan, refused when the token shards cannot fit the nodes' disks), its checkpoints, its transport
    expectation and its fabric minimum (trainPip is judged with the config). The first three None when the model's
    architecture cannot be read at preview; the data plan None without a dataset or when its size cannot be read."""
    check_job_data(cfg)
    workload = job_config.workload_config(cfg, gpu)  # the workload's own checks of the flags first
    chat_template.check(cfg)  # chat data: a tokenizer with a template, or trainChatTemplate
    if warning := hub_access.check_push(cfg.train.push_to_hub,
                                        cfg.train.secret_env.reveal().get(hub_access.HUB_TOKEN_VARIABLE)):
        warn(warning)  # trainPushToHub: the token may write there (one whoami-v2)
    dataset_records.check_train_dataset(cfg, identity=identity, region=region)  # every record the job would read
    train = cfg.train
    workers = check_workers(cfg, gpu)
    fabric_env.check(train.env, gpu)  # NCCL_ALGO=NVLS on L4s, FI_EFA_USE_DEVICE_RDMA=1 on g6
    if warning := job_layout.one_node_warning(
            workload.sharding, workers, workload.ranks_per_node or layout_rules.packed_ranks_per_node(workers, gpu.gpus),
            cfg.gpu_node_count, gpu):
        warn(warning)
    check_job_model(cfg)
    # The tokenizer's size against config.json's vocab_size (one bounded read) before the model gate's imports.
    architecture = model_config.resolve(train.model_id, train.model_config,
                                        hub_token=train.secret_env.reveal().get(model_config.HUB_TOKEN_VARIABLE),
                                        identity=identity, region=region,
                                        check_first=lambda config: check_before_gate(cfg, workload, config, gpu,
                                                                                     workers))
    plan = layout = checkpoint = save = None
    if isinstance(architecture, model_config.Known):
        if architecture.warning:
            warn(architecture.warning)
        plan = check_job_shape(workload, architecture.config, gpu, workers, model=train.model_config or train.model_id,
                               node_count=cfg.gpu_node_count)
        layout = job_layout.predict(workload, architecture.config, gpu, workers, plan)
        check_time_limit(cfg, memory_plan.apply(workload, plan), architecture.config, gpu)
        save = checkpoint_cost.plan(memory_plan.apply(workload, plan), architecture.config, gpu, workers)
        checkpoint = save.as_dict()
        if warning := checkpoint_cost.always_in_flight_warning(save):
            warn(warning)
    else:
        warn(f"trainModelId {train.model_id}: {architecture.reason}, so trainSeqLen and the GPU memory of "
             "the job are checked only on the cluster")
    data = data_cost.plan(cfg, gpu, checkpoint_node_bytes=save.node_bytes if save else 0.0, identity=identity,
                          region=region)
    check_shared_storage(cfg)
    check_transport_expectation(cfg, gpu, workers)
    check_min_bus_bandwidth(cfg, gpu, workers)
    return plan, layout, checkpoint, data.as_dict() if data else None


def check_workers(cfg: StackConfig, gpu: InstanceFacts) -> int:
    """The job's worker count (0: one per GPU), at most one per GPU of the cluster."""
    gpus = gpu.gpus * cfg.gpu_node_count
    workers = cfg.train.num_workers or gpus
    if workers > gpus:
        raise ValueError(f"config key 'trainNumWorkers': {workers} workers need a GPU each, and the cluster has "
                         f"{gpus} ({cfg.gpu_node_count} x {gpu.gpus}); allowed: 0 (one per GPU) to {gpus}")
    return workers


def check_shared_storage(cfg: StackConfig) -> None:
    storage_path = cfg.train.storage_path
    if storage_path and not storage_path.startswith("s3://") and cfg.gpu_node_count > 1:
        raise ValueError(
            f"config key 'trainStoragePath': {storage_path} is a directory on each node, and Ray Train needs "
            f"one place that the workers on all {cfg.gpu_node_count} GPU nodes and the head share; allowed: "
            "s3://bucket/prefix (the Ray pods' own role gets access to it), or empty for no checkpoints")


def check_job_offline(cfg: StackConfig, gpu: InstanceFacts) -> None:
    """What check_job decides from the stack's figures and a model's config known here (trainModelConfig, or one the
    project ships), reading nothing remote: `tools.job submit`'s checks of a run's flags against the cluster."""
    workload = job_config.workload_config(cfg, gpu)
    workers = check_workers(cfg, gpu)
    fabric_env.check(cfg.train.env, gpu)
    check_shared_storage(cfg)
    train = cfg.train
    if train.model_config or architectures.published(train.model_id) is not None:
        architecture = model_config.resolve(train.model_id, train.model_config, offline=True).config
        plan = check_job_shape(workload, architecture, gpu, workers, model=train.model_config or train.model_id,
                               node_count=cfg.gpu_node_count)
        check_time_limit(cfg, memory_plan.apply(workload, plan), architecture, gpu)


def check_job_data(cfg: StackConfig) -> None:
    """The job's dataset and tokenizer must be where its pods can read them: the hub or S3. A path on this machine is
    not in the pods, and on a cluster of several nodes a file on one node is not on the others."""
    train = cfg.train
    nodes = f"the job's pods on {cfg.gpu_node_count} GPU node{'s' if cfg.gpu_node_count > 1 else ''}"
    if is_local_dataset(train.dataset):
        raise ValueError(
            f"config key 'trainDataset': {train.dataset} is a path on this machine, which {nodes} cannot read; "
            "allowed: s3://bucket/key.jsonl (or .txt, .json; the Ray pods' role gets read access to it), or a Hugging "
            "Face dataset id")
    if train.tokenizer.startswith(("/", "./", "../", "~")):
        raise ValueError(
            f"config key 'trainTokenizer': {train.tokenizer} is a path on this machine, which {nodes} cannot read; "
            "allowed: a Hugging Face tokenizer or model id, or empty for trainModelId's tokenizer")


def check_job_model(cfg: StackConfig) -> None:
    """A model directory on this machine is not in the job's pods (the local run trains one: python -m workload.local
    --model_id DIR), and neither is a file:// (or any other scheme's) location: the pods read a Hub id or s3:// only;
    nor, for trainTokenizer, a location of another scheme."""
    train = cfg.train
    scheme, separator, _ = train.model_id.partition("://")
    if not train.model_config and separator and scheme != "s3":
        raise ValueError(f"config key 'trainModelId': a {scheme}:// location, which the job's pods cannot read; "
                         "allowed: a Hugging Face model id, or s3://bucket/prefix/ holding the model directory (the Ray "
                         "pods' role reads it)")
    if not train.model_config and model_source.is_path(train.model_id):
        raise ValueError(f"config key 'trainModelId': {train.model_id} is a path on this machine, which the job's pods "
                         "cannot read; allowed: a Hugging Face model id, or s3://bucket/prefix/ holding the model "
                         "directory (the Ray pods' role reads it)")
    # The tokenizer likewise, before check_tokenizer_vocabulary reads it here: file:///root/.aws/credentials is a
    # file on this machine, never the pods'.
    scheme, separator, _ = train.tokenizer.partition("://")
    if separator and scheme != "s3":
        raise ValueError(f"config key 'trainTokenizer': a {scheme}:// location, which the job's pods cannot read; "
                         "allowed: empty (trainModelId's), a Hugging Face tokenizer id, or s3://bucket/prefix/ holding "
                         "the tokenizer's files (the Ray pods' role reads it)")


def check_tokenizer_vocabulary(cfg: StackConfig, architecture: dict) -> None:
    """The tokenizer's ids must fit the model's embedding (workload.data.tokenizer_size, the rule the job's driver
    applies before Ray): refused naming both keys and both sizes; a size not readable here is a warning, and the
    job checks it before any worker starts. Random tokens (no trainDataset) are drawn below vocab_size."""
    train = cfg.train
    if not train.dataset:
        return
    name = train.tokenizer or train.model_id
    key = "trainTokenizer" if train.tokenizer else "trainModelId"
    token = train.secret_env.reveal().get(model_config.HUB_TOKEN_VARIABLE)
    if name in tokenizer_size.KNOWN_SIZES and (train.tokenizer or train.model_config):
        # Sized from the table, and downloaded by the data stage all the same: a gated one needs a token with access
        # (a shipped model's own tokenizer was asked for with its config.json, model_config.resolve).
        if warning := hub_access.check_download(name, tokenizer_size.TOKENIZER_CONFIG_FILE, key, token):
            warn(warning)
    tokens = model_config.tokenizer_tokens(name, key, token)
    if isinstance(tokens, model_config.Unknown):
        warn(f"{key} {name}: {tokens.reason}, so whether its tokens fit the model's vocabulary is checked "
             "by the job before any worker starts")
        return
    if (why := tokenizer_size.vocabulary_problem(tokens, architecture.get("vocab_size"))) is not None:
        model_key = "trainModelConfig" if train.model_config else "trainModelId"
        model = f"{model_key} {train.model_config or train.model_id}"
        raise config_error((key, model_key) if key != model_key else key,
                           f"the tokenizer {name} {why.replace('the model', model)}; allowed: a tokenizer of at most "
                           "vocab_size tokens, such as the model's own (trainTokenizer empty)")


def check_before_gate(cfg: StackConfig, workload: Any, config: dict, gpu: InstanceFacts, workers: int) -> None:
    """What the preview decides from a config.json's fields alone, before the model gate's seconds of torch and
    transformers imports: the tokenizer's size against vocab_size; then, for a family whose structure config.json's
    arithmetic gives as transformers builds it (structure.arithmetic_linear_shapes), check_job_shape itself (positions,
    qlora's NF4 shards, the memory plan), which after the gate would count the same parameters. A config the gate
    refuses without transformers (compatibility.check_raw) is left to it, in its own words, and so is one that fits:
    the gate then says what only the built model can (its layers, buffers and weights' names)."""
    check_tokenizer_vocabulary(cfg, config)
    if structure.arithmetic_linear_shapes(config) is None:
        return
    try:
        compatibility.check_raw(config, "")
    except ValueError:
        return
    check_job_shape(workload, config, gpu, workers, model=cfg.train.model_config or cfg.train.model_id,
                    node_count=cfg.gpu_node_count)


def check_job_shape(workload: Any, architecture: dict, gpu: InstanceFacts, workers: int, *, model: str,
                    node_count: int) -> memory_plan.MemoryPlan:
    """Sequence length against the model's positions; the memory plan (workload.model.memory_plan, the function the job
    runs) for the job's flags on `workers` GPUs of `gpu`. Refused when no plan fits, naming the memory the model needs
    per GPU and what would fit: a smaller per-GPU batch, more nodes, or another instance type the project knows."""
    check_positions(workload, architecture, model)
    if workload.method != "full":
        shapes = structure.linear_shapes(architecture)
        check_qlora_shards(workload, shapes, adapter_targets(workload, shapes), workers, gpu.gpus * node_count, model)
    compiled = workload.compile is not False  # the job compiles on a GPU unless told not to
    plan = memory_plan.for_job(workload, architecture, world_size=workers, ranks_per_node=gpu.gpus,
                               gpu_memory_mib=gpu.gpu_memory_mib, compiled=compiled)
    if plan.fits:
        return plan
    billions = memory.parameter_count(architecture) / 1e9
    method = f" with trainMethod {workload.method}" if workload.method != "full" else ""
    raise ValueError(
        f"config keys 'trainModelId', 'trainBatchSize', 'trainSeqLen': {model} ({billions:.2f} B parameters) needs "
        f"{plan.peak_gib:.1f} GiB on each of the {workers} GPUs of {gpu.instance_type}{method} at "
        f"{workload.batch_size} x "
        f"{workload.seq_len} tokens per GPU even with {plan.describe().split(':')[0]}, and they leave "
        f"{plan.usable_gib - memory.MARGIN_GIB:.1f} GiB ({memory.MARGIN_GIB:g} GiB kept free); allowed: "
        + "; or ".join(what_would_fit(workload, architecture, gpu, workers, node_count=node_count, compiled=compiled)))


def check_positions(workload: Any, architecture: dict, model: str) -> None:
    positions = architecture.get("max_position_embeddings")
    if positions and workload.seq_len > positions:
        raise ValueError(f"config key 'trainSeqLen': {workload.seq_len} tokens exceed {model}'s {positions} positions; "
                         f"allowed: 1 to {positions}")


def adapter_targets(workload: Any, shapes: dict[str, tuple[int, int]]) -> tuple[str, ...]:
    """The linear layers the adapters go on, by the model's own names (`shapes`: structure.linear_shapes)."""
    names = tuple(sorted({name.rsplit(".", 1)[-1] for name in shapes}))
    return adapters.resolve(workload.lora_targets, names, "config key 'trainLoraTargets'")


def check_qlora_shards(workload: Any, shapes: dict[str, tuple[int, int]], targets: tuple[str, ...], workers: int,
                       gpus: int, model: str) -> None:
    """qlora's NF4 weights (`shapes`: structure.linear_shapes) split into one shard a worker
    (adapters.qlora_shards_problem, which each worker would otherwise find once the nodes bill), naming the worker
    counts that would."""
    if workload.method != "qlora":
        return
    if (why := adapters.qlora_shards_problem(shapes, targets, workers)) is None:
        return
    fitting = [n for n in range(1, gpus + 1) if adapters.qlora_shards_problem(shapes, targets, n) is None]
    raise ValueError(f"config keys 'trainMethod', 'trainNumWorkers': qlora on {workers} workers: {model}'s {why}; "
                     f"allowed: trainNumWorkers {', '.join(map(str, fitting)) or 'none'} of the {gpus} GPUs, or "
                     "trainMethod lora")


def what_would_fit(workload: Any, architecture: dict, gpu: InstanceFacts, workers: int, *, node_count: int,
                   compiled: bool) -> list[str]:
    """A refusal's alternatives, each found in closed form or by binary search: a smaller per-GPU batch on this
    cluster, the node count of this type at which the shards fit, the known instance types that fit at this node
    count (or the node count they need)."""
    method = memory_plan.method_settings(workload)
    options = lighter_methods(workload, architecture, gpu, workers, compiled=compiled)
    batch = memory_plan.largest_micro_batch(architecture, seq_len=workload.seq_len, shards=workers,
                                            world_size=workers, gpu_memory_mib=gpu.gpu_memory_mib,
                                            below=workload.batch_size, compiled=compiled, method=method)
    if batch:
        options.append(f"a per-GPU batch (trainBatchSize) of {'1' if batch == 1 else f'1 to {batch}'} at trainSeqLen "
                       f"{workload.seq_len}")

    def nodes_for(gpus_per_node: int, gpu_memory_mib: int) -> int | None:
        shards = memory.shards_needed(architecture, usable=memory.usable_gib(gpu_memory_mib),
                                      micro_batch=workload.batch_size, seq_len=workload.seq_len,
                                      activation_checkpointing=True, reshard_after_forward=True, grad_accum_steps=1,
                                      reduce_dtype=workload.reduce_dtype, compiled=compiled, **method)
        return -(-shards // gpus_per_node) if shards else None

    nodes = nodes_for(gpu.gpus, gpu.gpu_memory_mib)
    if nodes and nodes > node_count:
        options.append(f"gpuNodeCount {nodes} or more of {gpu.instance_type} (the state sharded over "
                       f"{nodes * gpu.gpus} GPUs, with full sharding, activation checkpointing and "
                       "reshard_after_forward)")
    for instance_type, (gpus_per_node, gpu_memory_mib, _) in instance_facts.KNOWN_GPU_INSTANCE_TYPES.items():
        if instance_type == gpu.instance_type or gpu_memory_mib <= gpu.gpu_memory_mib:
            continue
        other = memory_plan.for_job(workload, architecture, world_size=gpus_per_node * node_count,
                                    ranks_per_node=gpus_per_node, gpu_memory_mib=gpu_memory_mib, compiled=compiled)
        if other.fits:
            options.append(f"gpuInstanceType {instance_type} ({node_count} nodes: {other.describe().split(':')[0]})")
        elif (needed := nodes_for(gpus_per_node, gpu_memory_mib)) is not None:
            options.append(f"gpuInstanceType {instance_type} with gpuNodeCount {needed} or more")
    return options or [f"a smaller model or a shorter trainSeqLen (nothing the project knows fits {workload.seq_len}"
                       " tokens)"]


# The least a job spends before its first step, whatever its model: a local run of the tiny model on random tokens
# reaches it in 32 to 35 s (bench/results/RESULTS.md, issue 44's table); a cluster job also downloads its model and
# starts its GPU workers. A lower bound, so a refusal that counts it is certain.
STARTUP_ALLOWANCE_S = 60


def check_time_limit(cfg: StackConfig, workload: Any, architecture: dict, gpu: InstanceFacts) -> None:
    """trainTimeoutMinutes must hold the start-up and trainSteps steps at their fastest: each step's FLOPs at the GPU's
    full bf16 peak (workload.model.layout.step_compute_seconds at 100% MFU instead of its ASSUMED_MFU), no
    communication, no recompute. Skipped for an unlisted GPU and for --epochs (steps known only on the cluster)."""
    step = step_compute_seconds(workload, architecture, gpu.gpu_name)
    if step is None or workload.epochs:
        return
    fastest = STARTUP_ALLOWANCE_S + workload.steps * step * ASSUMED_MFU
    minutes = cfg.train.timeout_minutes
    if minutes * 60 < fastest:
        raise ValueError(
            f"config keys 'trainTimeoutMinutes', 'trainSteps': {minutes} minute{'s' if minutes != 1 else ''} cannot hold {workload.steps} steps of "
            f"at least {step * ASSUMED_MFU:.2f} s each on {gpu.gpu_name} at its full bf16 peak, plus "
            f"{STARTUP_ALLOWANCE_S} s of start-up; allowed: trainTimeoutMinutes {math.ceil(fastest / 60)} or more "
            "(more for the real pace), or fewer trainSteps")


# NCCL_NET forces the one network NCCL uses, by name (NCCL's environment variables: the built-in "IB" and "Socket",
# or a plugin's name). aws-ofi-nccl registers as "AWS Libfabric" ("Libfabric" and "OFI" in older releases), the only
# one that drives EFA; any other name (IB: no verbs device on EFA; Socket: TCP) cannot give an efa transport.
EFA_NET_NAMES = ("aws libfabric", "libfabric", "ofi")
# The ncclDebug levels at which NCCL prints its INFO lines (INFO and every level above it).
NCCL_DEBUG_SHOWS_INFO = ("INFO", "TRACE")


def check_transport_expectation(cfg: StackConfig, gpu: InstanceFacts, workers: int) -> None:
    """trainExpectTransport must be what this cluster and the job's env can show: the job fails after it ran
    (and billed) when every rank's NCCL transport differs from it."""
    expect = cfg.train.expect_transport
    env = {**cfg.transport_env, **cfg.train.env}  # what the ranks see: the job's runtime_env wins
    # NCCL loads libnccl-net-<NCCL_NET_PLUGIN>.so; aws-ofi-nccl is the one that drives EFA (ofi, aws-ofi). Any other
    # plugin (none: no plugin) leaves NCCL its built-in transports, sockets between nodes.
    plugin = env.get("NCCL_NET_PLUGIN", "")
    ofi_plugin = "ofi" in plugin.lower()
    sockets = env.get("NCCL_NET", "").lower() == "socket" or env.get("FI_PROVIDER") != "efa" or not ofi_plugin
    # Ray Train's default placement packs workers onto as few nodes as hold them (ScalingConfig
    # placement_strategy="PACK"): workers that fit on one node's GPUs never cross nodes.
    crosses_nodes = cfg.gpu_node_count > 1 and workers > gpu.gpus
    key = "trainExpectTransport"
    if expect in ("efa", "socket") and not crosses_nodes:
        raise ValueError(
            f"config key {key!r}: {expect} needs ranks on two or more nodes, but the job's {workers} workers "
            f"{'have one GPU node' if cfg.gpu_node_count == 1 else f'fit on one node of {gpu.gpus} GPUs'}, so NCCL "
            "shows intra-node; allowed: intra-node or any (or more gpuNodeCount / trainNumWorkers)")
    # The verdict reads NCCL's INFO lines (workload/fabric/transport.py); NCCL prints a line of level L only when
    # NCCL_DEBUG is L or above (nccl src/include/nccl_common.h ncclDebugLogLevel: VERSION < WARN < INFO < ABORT < TRACE,
    # src/debug.cc ncclDebugLog), so below INFO every rank's verdict is unknown and the job fails its check.
    level = str(env.get("NCCL_DEBUG", "")).upper()
    if expect != "any" and level not in NCCL_DEBUG_SHOWS_INFO:
        raise ValueError(f"config keys 'ncclDebug', {key!r}: {expect}, but ncclDebug {level or 'unset'} prints none "
                         "of the NCCL INFO lines the transport check reads; allowed: ncclDebug INFO or TRACE, or "
                         f"{key} any")
    # Each rank reads its own NCCL debug file back for its verdict (workload/fabric/nccl_logs.py, NCCL's expansion:
    # %h the host, %p the pid, %% a percent sign). NCCL opens the file with fopen(name, "w") in every process (src/
    # debug.cc ncclDebugInit), so without %p the ranks of a node overwrite one file and no verdict is a rank's own;
    # empty, no rank reads any (job_config.NCCL_DEBUG_FILE is the stack's own, /tmp/nccl-%h-%p.log).
    debug_file = env.get("NCCL_DEBUG_FILE")
    if expect != "any" and debug_file is not None and not any(m[1] == "p" for m in re.finditer(r"%(.)", debug_file)):
        raise ValueError(f"config keys 'trainEnv', {key!r}: {expect}, but trainEnv's NCCL_DEBUG_FILE "
                         f"{'is empty' if not debug_file else 'holds no %p'}, so the ranks of a node would write one "
                         "file over each other and the transport check reads no rank's own lines; allowed: trainEnv "
                         f"without NCCL_DEBUG_FILE (the stack sets /tmp/nccl-%h-%p.log), a name with %p, or {key} any")
    if expect == "efa" and not ofi_plugin:
        raise ValueError(f"config keys 'ncclNetPlugin', {key!r}: efa, but ncclNetPlugin {plugin} does not load "
                         "aws-ofi-nccl, so NCCL sends over TCP sockets; allowed: ncclNetPlugin ofi (the default), or "
                         f"{key} socket or any")
    net = env.get("NCCL_NET", "")
    if expect == "efa" and net and net.strip().lower() not in EFA_NET_NAMES:
        # trainEnv's values are never quoted (they may hold a token): Socket alone is named.
        forced = ("NCCL_NET=Socket sends NCCL over TCP sockets" if net.lower() == "socket" else
                  "NCCL_NET names a network other than aws-ofi-nccl's, the one NCCL drives EFA through")
        raise ValueError(f"config keys 'trainEnv', {key!r}: efa, but trainEnv {forced}; allowed: trainEnv without "
                         f"NCCL_NET (or NCCL_NET='AWS Libfabric'), or {key} socket or any with that env")
    if expect == "efa" and sockets:
        # trainEnv may not set FI_PROVIDER (infra/config/env_names.py): fiProvider is the one place it is set.
        raise ValueError(f"config key {key!r}: efa, but FI_PROVIDER={env.get('FI_PROVIDER')} (fiProvider) sends NCCL "
                         "over TCP sockets; allowed: socket or any with that env, or efa without it")
    if expect == "socket" and not sockets:
        raise ValueError(f"config key {key!r}: socket, but the workers load aws-ofi-nccl on EFA, so NCCL uses EFA; "
                         "allowed: efa or any, or socket with trainEnv NCCL_NET=Socket")
    if expect == "intra-node" and workers > 1 and (off := fabric_env.intra_node_transports_off(cfg.train.env)):
        raise ValueError(f"config keys 'trainEnv', {key!r}: intra-node, but trainEnv's {off} turn off both of NCCL's "
                         "transports inside a node (P2P and shared memory), so the ranks talk through the network "
                         f"plugin; allowed: trainEnv without one of them, or {key} any")
    if expect == "intra-node" and crosses_nodes:
        raise ValueError(f"config key {key!r}: intra-node, but {workers} workers span more than one node of "
                         f"{gpu.gpus} GPUs; allowed: efa or any, or trainNumWorkers up to {gpu.gpus}")


def check_min_bus_bandwidth(cfg: StackConfig, gpu: InstanceFacts, workers: int) -> None:
    """trainMinBusBandwidthGBps must be one the fabric can reach: across nodes, a collective's bus bandwidth (as
    nccl-tests counts it) is bounded by a node's network, EC2's network_gbps / 8 in GB/s. Within one node the bound is
    NVLink's or PCIe's, which EC2 does not describe, so only the network's is checked."""
    minimum = cfg.train.min_bus_gbytes_per_s
    if minimum and workers == 1:  # workload/fabric/bandwidth.py: busbw = algbw x (n - 1) / n, 0 on one rank
        raise ValueError(
            f"config keys 'trainMinBusBandwidthGBps', 'trainNumWorkers': {minimum:g} GB/s, but one worker has no peer, "
            "so its bus bandwidth is 0 and the fabric check always fails; allowed: trainMinBusBandwidthGBps 0, or "
            "trainNumWorkers 2 or more")
    link = gpu.network_gbps / 8
    if cfg.gpu_node_count > 1 and workers > gpu.gpus and link and minimum > link:
        raise ValueError(
            f"config key 'trainMinBusBandwidthGBps': {minimum:g} GB/s is more than the {gpu.network_gbps:g} Gbit/s "
            f"network of {gpu.instance_type} carries between nodes ({link:g} GB/s), so the job would always fail "
            f"its fabric check; allowed: 0 (no minimum) to {link:g}")


def lighter_methods(workload: Any, architecture: dict, gpu: InstanceFacts, workers: int, *,
                    compiled: bool) -> list[str]:
    """The first method after the job's, in the order full, lora, qlora (each keeps less of the model per GPU), whose
    plan fits this cluster: as requested, or else at the largest per-GPU batch that fits; empty when none does."""
    later = adapters.METHODS[adapters.METHODS.index(workload.method) + 1:]
    for method in later:
        plan = memory_plan.for_job(workload, architecture, world_size=workers, ranks_per_node=gpu.gpus,
                                   gpu_memory_mib=gpu.gpu_memory_mib, compiled=compiled, method=method)
        if plan.fits:
            levers = plan.describe().split(":")[0]
            return [f"trainMethod: {method} ({plan.peak_gib:.1f} of {plan.usable_gib:.1f} GiB per GPU with {levers})"]
        batch = memory_plan.largest_micro_batch(
            architecture, seq_len=workload.seq_len, shards=workers, world_size=workers,
            gpu_memory_mib=gpu.gpu_memory_mib, below=workload.batch_size, compiled=compiled,
            method=memory_plan.method_settings(workload, method))
        if batch:
            return [f"trainMethod: {method} with trainBatchSize {'1' if batch == 1 else f'1 to {batch}'} (fits with "
                    "activation checkpointing and reshard_after_forward)"]
    return []
