"""`python -m workload.local [train flags]`: the whole job on this machine, through the same path as a real cluster.

It starts a one-node Ray cluster (`ray start --head`, token authentication on, as Ray 2.60 defaults to), submits
the training job (`python3 -m workload.train`) through workload.run.submit, streams its progress, stops the cluster it
started (also on an error or Ctrl-C), loads the model the job exported with `AutoModelForCausalLM.from_pretrained`
and prints what it generates from a prompt, and prints the job's summary once, as its last line. It takes every flag
`workload.train` takes, with the defaults below: a tiny Qwen2 model on the repository's sample corpus
(data/corpus.txt) with a fifth held out for evaluation, so the loss visibly falls; `--dataset ''` trains on random
tokens as the original recipe does.
"""
from __future__ import annotations

import dataclasses
import json
import os
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from typing import Iterator, Sequence

from workload import cli, config_file, storage
from workload.config import DECLARED, SUMMARY_PREFIX, TrainConfig, build_parser, is_local_dataset
from workload.run import checks as local_checks
from workload.run import output as local_output
from workload.run import preflight, run_lock, services, tracker_variables
from workload.run.head_supervisor import stop_session

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# Small enough to finish in under a minute on 2 CPU cores (Ray's start-up is most of it), large enough for the loss to
# fall until the exported model completes a corpus line, with a sharded checkpoint half-way.
LOCAL_DEFAULTS = {
    "model_config": "tiny",
    "steps": 40,
    "batch_size": 4,
    "seq_len": 64,
    "learning_rate": 5e-3,
    "warmup_steps": 4,
    "checkpoint_every": 20,
    "dataset": os.path.join(REPO, "data", "corpus.txt"),
    "tokenizer": os.path.join(REPO, "data", "tokenizer"),
    "eval_fraction": 0.2,
    "eval_every": 10,
    # Under the repository's git-ignored runs/, whatever the current directory.
    "storage_path": os.path.join(REPO, "runs", "local"),
    "run_name": "local-<date>-<time>-<pid>",
}
# A chat or prompt-completion run left on the sample corpus trains on the sample records instead, with the sample
# tokenizer that has a chat template (data/make_sample_data.py), in blocks that hold a conversation with the
# template's system prompt (Qwen2.5's default one is 22 tokens of bytes in this vocabulary).
FORMAT_DEFAULTS = {
    "chat": {"dataset": os.path.join(REPO, "data", "conversations.jsonl"),
             "tokenizer": os.path.join(REPO, "data", "chat-tokenizer"), "seq_len": 128},
    "prompt-completion": {"dataset": os.path.join(REPO, "data", "instructions.jsonl"),
                          "tokenizer": os.path.join(REPO, "data", "chat-tokenizer"), "seq_len": 128},
}
# What the local run asks a chat-trained model, through its chat template: a question of the sample's kind.
CHAT_PROMPTS = {
    "chat": [{"role": "system", "content": "answer in one line ."}, {"role": "user", "content": "the cat chases what ?"}],
    "prompt-completion": [{"role": "user", "content": "the cat chases what ?"}],
}
# Ray Train settings for a one-machine run, passed in the job's env. Nothing here can be preempted, so no watcher
# (in Ray 2.60 it also logs a spurious error at start); and the controller polls its workers every 0.5 s instead
# of 2 s, which a 20-step run otherwise waits on at each checkpoint report.
LOCAL_RAY_TRAIN_ENV = {
    "RAY_TRAIN_ENABLE_PREEMPTION_WATCHER": "0",
    "RAY_TRAIN_HEALTH_CHECK_INTERVAL_S": "0.5",
}
HEAD_START_TIMEOUT_S = 90
LOOPBACK = "127.0.0.1"
# Ray's switch for clusters of one machine (ray/_private/ray_constants.py, ENABLE_RAY_CLUSTERS_ENV_VAR).
LOCAL_CLUSTER_ENV = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"
JOB_TIMEOUT_S = 600
# What the local run asks of the model it exported: the start of a corpus line, which the trained model completes.
PROMPT = "the cat"
NEW_TOKENS = 8
# This interpreter's own `ray`, whatever PATH says.
RAY_CLI = os.path.join(os.path.dirname(sys.executable), "ray")
# Runs `ray start` and stops the cluster when this process is gone, even SIGKILLed (see the module).
SUPERVISOR = os.path.join(REPO, "workload", "run", "head_supervisor.py")


def free_port() -> int:
    return free_ports(1)[0]


def free_ports(count: int, taken: tuple[int, ...] = ()) -> list[int]:
    """`count` distinct ports free on loopback, none of `taken`. Every probe stays open until all are chosen: probes
    closed one by one can be given the same port twice, and `ray start` then refuses two of its listeners one port."""
    probes: list[socket.socket] = []
    ports: list[int] = []
    try:
        while len(ports) < count:
            probe = socket.socket()
            probes.append(probe)
            probe.bind(("127.0.0.1", 0))
            if probe.getsockname()[1] not in taken:  # one of `taken` stays held by its probe: not offered again
                ports.append(probe.getsockname()[1])
        return ports
    finally:
        for probe in probes:
            probe.close()


def head_environment(token_path: str, gcs_address: str) -> dict[str, str]:
    """The `ray start` process's environment, which every Ray process of the cluster inherits: token auth from our
    own token file; every listener on loopback; RAY_ADDRESS naming this cluster, since Ray's helpers that look for "the"
    cluster (Ray Train's placement-group cleaner among them) otherwise fail when another Ray cluster runs on the
    machine; and this interpreter first on PATH, since the job's entrypoint `python3 -m workload.train` is resolved
    there (so `.venv/bin/python -m workload.local` works without activating the venv)."""
    env = {**os.environ, "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": token_path, "RAY_ADDRESS": gcs_address,
           # A one-machine cluster, as Ray makes them on macOS and Windows: without this, `ray start` replaces
           # --node-ip-address 127.0.0.1 by the machine's outward address (ray/_private/services.py,
           # resolve_ip_for_localhost), and the GCS, the raylet, every worker's gRPC server, the client server and
           # the agents (metrics included) listen on all interfaces. With it they bind loopback: the C++ servers
           # and the Python agents choose their address from the node's (dashboard/agent.py,
           # reporter_agent.py: localhost if the node is). No worker node can join (scripts.py refuses one).
           LOCAL_CLUSTER_ENV: "0"}
    env.pop("RAY_AUTH_TOKEN", None)
    env["PATH"] = os.pathsep.join([os.path.dirname(sys.executable), env.get("PATH", "")])
    return env


@contextmanager
def local_cluster(metrics_export_port: int | None = None) -> Iterator[tuple[str, str]]:
    """A `ray start --head --block` of our own, CPU only: yields (job server address, token). On exit every process
    it started is stopped, and nothing else (other Ray clusters on this machine are left alone). `metrics_export_port`:
    where the node serves its Prometheus metrics (unset: a port Ray picks)."""
    temp_dir = tempfile.mkdtemp(prefix="ray-local-", dir=local_checks.ray_temp_base())
    token = secrets.token_hex(32)
    token_path = os.path.join(temp_dir, "auth_token")
    with open(os.open(token_path, os.O_WRONLY | os.O_CREAT, 0o600), "w") as file:
        file.write(token)
    taken = (metrics_export_port,) if metrics_export_port else ()
    dashboard_port, gcs_port, client_server_port, agent_port = free_ports(4, taken)
    env = head_environment(token_path, f"{LOOPBACK}:{gcs_port}")
    env["TMPDIR"] = os.path.dirname(temp_dir)  # Ray's processes make sockets under TMPDIR too: the short one
    ray_cli = RAY_CLI
    command = [
        ray_cli, "start", "--head", "--block", "--disable-usage-stats",
        "--temp-dir", temp_dir,
        # Loopback only (with LOCAL_CLUSTER_ENV, see head_environment): nothing of this cluster is reachable from
        # the network. tests/runs/test_workload_submit.py lists every listening socket of its processes.
        "--node-ip-address", LOOPBACK,
        "--port", str(gcs_port),
        "--ray-client-server-port", str(client_server_port),
        "--dashboard-host", LOOPBACK,
        "--dashboard-port", str(dashboard_port),
        "--dashboard-agent-listen-port", str(agent_port),
        # The local run is the CPU path even on a machine with a GPU: the driver then sizes 2 CPU workers, which
        # must fit even on a one-core machine.
        "--num-gpus", "0",
        "--num-cpus", str(local_checks.local_cpus()),
        *(["--metrics-export-port", str(metrics_export_port)] if metrics_export_port else []),
    ]
    # This process's Ray client code reads RAY_ADDRESS too (the job client's auth look-up asks that GCS): one the
    # shell kept from another cluster (`export RAY_ADDRESS=...` for `ray job submit`) had it wait minutes on that
    # cluster. Unset while ours runs: the client is given our job server's address.
    shell_ray_address = os.environ.pop("RAY_ADDRESS", None)
    if shell_ray_address:
        cli.note(f"RAY_ADDRESS={shell_ray_address} is left aside: the local run starts its own Ray cluster "
                 "(`python -m tools.job submit` runs on a stack's)")
    head_log = open(os.path.join(temp_dir, "ray-start.log"), "w+")
    head = subprocess.Popen([sys.executable, "-I", SUPERVISOR, *command], env=env, stdin=subprocess.PIPE,
                            stdout=head_log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        address = f"http://{LOOPBACK}:{dashboard_port}"
        _wait_for_job_server(address, token, head, head_log)
        yield address, token
    finally:
        _stop(head)
        head_log.close()
        shutil.rmtree(temp_dir, ignore_errors=True)
        if shell_ray_address:
            os.environ["RAY_ADDRESS"] = shell_ray_address


def _wait_for_job_server(address: str, token: str, head: subprocess.Popen, head_log) -> None:
    from workload.run.submit import JobAuthenticationError, connect

    deadline = time.monotonic() + HEAD_START_TIMEOUT_S
    while True:
        if head.poll() is not None:
            head_log.seek(0)
            raise cli.EnvironmentProblem(f"ray start --head exited with code {head.returncode}; its last lines:\n"
                                         + "\n".join(head_log.read().splitlines()[-15:]))
        try:
            connect(address, token)
            return
        except JobAuthenticationError:
            raise
        except Exception as error:
            if time.monotonic() > deadline:
                raise cli.EnvironmentProblem(f"the Ray job server at {address} did not come up within "
                                   f"{HEAD_START_TIMEOUT_S} s ({error})") from error
            time.sleep(0.25)  # the run waits on it: asked often, no second lost on each start


def _stop(head: subprocess.Popen) -> None:
    """Stop every process the head started: SIGTERM, then SIGKILL to what is left after a grace period.

    `start_new_session` made the head's supervisor a session leader. Ray's workers take process groups of their own
    but keep the session, so the session id, not the process group, names exactly the processes of this cluster."""
    stop_session(head.pid, reap=head.poll)
    head.stdin.close()
    head.wait()


def parse_args(argv: Sequence[str] | None = None) -> TrainConfig:
    return parse_command(argv)[0]


def parse_command(argv: Sequence[str] | None = None) -> tuple[TrainConfig, bool, bool]:
    """The training flags (over --config's file), --verbose (the local run's own: how much of the job's log to show)
    and --print_config."""
    parser = build_parser(
        "python -m workload.local",
        "Run the training job on this machine: a one-node Ray cluster, the job submitted through the Ray Jobs\n"
        "API as on a real cluster, its progress streamed, its summary printed last. Same flags as\n"
        "`python -m workload.train`, with defaults for a CPU-sized run.\n\n"
        "  python -m workload.local                 # tiny model, data/corpus.txt, 40 steps, then a generation\n"
        "  python -m workload.local --steps 5 --dataset ''   # random tokens, as the original recipe\n"
        "  python -m workload.local --data_format chat       # a chat fine-tune on data/conversations.jsonl\n"
        "  python -m workload.local --model_id DIR      # fine-tune your model (a directory or a Hub id) with its\n"
        "                                           # own tokenizer: --model_id alone turns the tiny default off\n"
        "  python -m workload.local --config run.yaml --steps 10   # a run described in a file, one flag over it",
        defaults=LOCAL_DEFAULTS,
    )
    parser.add_argument("--verbose", action="store_true",
                        help="Show the job's whole log (Ray's own lines and result dumps) instead of its progress.")
    config_file.add_options(parser)
    args, print_config = config_file.parse(parser, argv)
    verbose = args.pop("verbose")
    argv = sys.argv[1:] if argv is None else list(argv)
    given, on_line = config_file.given(argv), config_file.command_line(argv)
    # A --model_id on the command line wins over a --config file's model_config, as every flag wins over the file.
    if "model_id" in given and "model_config" not in (on_line if "model_id" in on_line else given):
        # --model_id names the model to train: the tiny random-weight default gives way, and so does the sample
        # tokenizer, for the model's own.
        args["model_config"] = ""
        if "tokenizer" not in given:
            args["tokenizer"] = ""
    if {"model_config", "model_id"} <= on_line and args["model_config"]:
        # As --help says, an explicit --model_config wins; said, so the model named is not silently left untrained.
        cli.note(f"--model_config {args['model_config']} wins over --model_id {args['model_id']}: a random-weight "
                 f"{args['model_config']} model is trained, not {args['model_id']}")
    if args["run_name"] == LOCAL_DEFAULTS["run_name"]:
        args["run_name"] = new_run_name()
    # Their spelling of a choice as ours (`Chat`, `prompt_completion`) before the local defaults read the choices.
    args.update({declared.name: declared.canonical(args[declared.name]) for declared in DECLARED if declared.choices})
    for name, value in FORMAT_DEFAULTS.get(args["data_format"], {}).items():
        if args[name] == LOCAL_DEFAULTS.get(name, TrainConfig.__dataclass_fields__[name].default):
            args[name] = value
    if not args["dataset"]:
        # Random tokens have nothing to hold out: the local defaults' evaluation goes with the sample corpus, and
        # nothing to tokenize: so does the sample tokenizer, unless typed (then workload/config/rules.py refuses it).
        for name in ("eval_fraction", "eval_every"):
            if args[name] == LOCAL_DEFAULTS[name]:
                args[name] = 0
        if "tokenizer" not in given:
            args["tokenizer"] = ""
    # A setting the user gave wins over a local default it conflicts with, which they never typed: --eval_split
    # replaces the default held-out fraction, and an empty --storage_path means a run without checkpoints.
    if "eval_split" in given and "eval_fraction" not in given:
        args["eval_fraction"] = 0.0
    if "storage_path" in given and not args["storage_path"] and "checkpoint_every" not in given:
        args["checkpoint_every"] = 0
    # A short run (--steps 3) keeps the warmup it can hold, a quarter of its steps: the default's 4 were never typed;
    # and the default intervals it would outlast are 0, which they would act as (typed, rules.py refuses them; a
    # --print_config file replays the defaults, so the default's value in a file counts as untyped).
    warmup_default = LOCAL_DEFAULTS.get("warmup_steps", TrainConfig.__dataclass_fields__["warmup_steps"].default)
    if ("warmup_steps" not in on_line and args["warmup_steps"] == warmup_default and not args.get("epochs")
            and args["warmup_steps"] > args["steps"]):
        args["warmup_steps"] = args["steps"] // 4
    for name in ("checkpoint_every", "eval_every"):
        if name not in on_line and args[name] == LOCAL_DEFAULTS[name] and args[name] > args["steps"]:
            args[name] = 0
    cfg = TrainConfig(**args)
    if (inert := local_checks.typed_without_effect_here(cfg, on_line)) is not None:
        raise ValueError(inert)
    # The job runs in a copy of workload/ elsewhere, so local files are passed by absolute path.
    return dataclasses.replace(
        cfg,
        dataset=os.path.abspath(os.path.expanduser(cfg.dataset)) if is_local_dataset(cfg.dataset) else cfg.dataset,
        tokenizer=os.path.abspath(cfg.tokenizer) if os.path.isdir(cfg.tokenizer) else cfg.tokenizer,
        chat_template=os.path.abspath(os.path.expanduser(cfg.chat_template)) if os.path.isfile(
            os.path.expanduser(cfg.chat_template)) else cfg.chat_template,
        storage_path=os.path.abspath(cfg.storage_path) if cfg.storage_path and "://" not in cfg.storage_path
        else cfg.storage_path,
    ), verbose, print_config


def job_config(cfg: TrainConfig) -> TrainConfig:
    """The job's: it runs in a copy of workload/ elsewhere, so a --model_id directory goes by its absolute path."""
    directory = os.path.expanduser(cfg.model_id)
    absolute = not cfg.model_config and os.path.isdir(directory)  # the checks before Ray name it as it was typed
    return dataclasses.replace(cfg, model_id=os.path.abspath(directory)) if absolute else cfg


def new_run_name() -> str:
    """`local-<date>-<time>-<pid>`: two runs started in the same second on one machine are two live processes,
    so their pids, and their run directories, differ."""
    return time.strftime("local-%Y%m%d-%H%M%S-") + str(os.getpid())


def announce_resume(cfg: TrainConfig, resumed_at: int | None) -> None:
    """Say what this run does with an earlier run of its name; a new run's flags are recorded for the next one."""
    if resumed_at is None:
        local_checks.record_flags(cfg)
    else:
        print(f"resuming run {cfg.run_name} from step {resumed_at}, its latest checkpoint: steps "
              f"{resumed_at + 1}..{cfg.steps}", flush=True)


def finished(cfg: TrainConfig, resumed_at: int) -> None:
    """A run of this name already reached --steps: say so, where its model is, and how to train on; Ray is not
    started for nothing (as `trl sft` with a finished output_dir and resume, that has no step left to run)."""
    run = os.path.join(cfg.storage_path, cfg.run_name)  # local: resume_step reads only a local --storage_path
    model = os.path.join(run, storage.model_name(resumed_at))
    where = (f"its model: {model}" if os.path.isdir(model) else f"export its last checkpoint with `python -m "
             f"workload.export {os.path.join(run, storage.checkpoint_name(resumed_at))}`")
    print(f"run {cfg.run_name} already reached step {resumed_at} of --steps {cfg.steps}: nothing left to train; "
          f"{where}", flush=True)
    print(f"to train it further give --steps above {resumed_at}; for a new run give another --run_name", flush=True)


def main(argv: Sequence[str] | None = None) -> int:
    cfg, verbose, print_config = parse_command(argv)
    if print_config:
        print(config_file.render(cfg), end="", flush=True)
        return cli.OK
    local_checks.check_not_under_a_launcher()
    lock = run_lock.acquire(cfg.storage_path, cfg.run_name)  # a second run of this --run_name now is refused
    try:
        return _run(cfg, verbose)
    finally:
        run_lock.release(lock)


def _run(cfg: TrainConfig, verbose: bool) -> int:
    started = time.monotonic()
    resumed_at = local_checks.check_before_ray(cfg)  # the data, storage, workers and an earlier run of the name
    if resumed_at is not None and resumed_at >= cfg.steps:
        finished(cfg, resumed_at)
        return cli.OK
    check_model_source(cfg)
    preflight.check_credentials(cfg)  # a missing key is the thing to say before a server that does not answer
    tracker_variables.say_unused(cfg.report_to)  # WANDB_PROJECT set while --report_to leaves W&B out
    services.check_services_reachable(cfg)  # MLflow, W&B, the Hub: a server that is down is exit 3 now, not later
    # Heavy imports (torch, transformers, Ray) only once the flags are good, so --help and typos answer at once:
    # preflight's checks that need none come first, then those that need torch and transformers.
    preflight.validate(cfg)  # a flag that does not fit the model or tokenizer fails here, naming it, before Ray
    from workload.run.submit import JobFailedError, parse_summary, submit_training_job
    announce_resume(cfg, resumed_at)
    print("starting a local Ray cluster (ray start --head, token authentication on)", flush=True)
    progress = local_output.Progress(verbose)
    if not verbose:
        local_output.quiet_ray_logging()
    try:
        with local_cluster() as (address, token):
            result = submit_training_job(
                address, job_config(cfg).to_args(), token=token, env_vars=LOCAL_RAY_TRAIN_ENV, timeout_s=JOB_TIMEOUT_S,
                on_log=progress)
    except JobFailedError as error:
        print("local Ray cluster stopped", flush=True)
        for line in progress.failure_tail(error.log_tail):
            print(line, flush=True)
        if (summary := parse_summary(error.log_tail)) is not None:  # a diverged run still reports how far it got
            print(SUMMARY_PREFIX + json.dumps(summary, allow_nan=False), flush=True)
        # Its log has just been streamed above: the reason without Ray's copy of the log is what is left to say. The
        # job's own exit 2 is its refusal of a flag or the data (packs into 0 training blocks): exit 2 here as well.
        refused = cli.UsageError if error.reason.rstrip().endswith(f"exit code {cli.USAGE}") else cli.CheckFailed
        raise refused(f"Ray job {error.job_id} {local_output.first_line(error.reason)}",
                              hint="" if verbose else "--verbose shows the job's whole log") from None
    print("local Ray cluster stopped", flush=True)
    model = result.summary.get("model")
    # A model trained on random tokens has no tokenizer to generate with.
    if model and os.path.isfile(os.path.join(model, "tokenizer_config.json")):
        if cfg.data_format in CHAT_PROMPTS:
            messages = CHAT_PROMPTS[cfg.data_format]
            print(f"from_pretrained({model}).generate(apply_chat_template({json.dumps(messages)})): "
                  f"{json.dumps(generate_chat(model, messages))}", flush=True)
        else:
            print(f"from_pretrained({model}).generate({PROMPT!r}): {json.dumps(generate(model, PROMPT))}", flush=True)
    for line in local_output.recap(result.summary, time.monotonic() - started):
        print(line, flush=True)
    print(SUMMARY_PREFIX + json.dumps(result.summary, allow_nan=False), flush=True)
    return cli.OK


def check_model_source(cfg: TrainConfig) -> None:
    """--model_id's config.json and its tokenizer on the Hub, one request each before torch, transformers and Ray
    load: no Hub, or a gated repo (exit 3, naming HF_TOKEN and the flag of the repo), a model not there (exit 2), in a
    second. A shipped config, a directory, s3:// are read later (a shipped model's access: services.check_hub_model)."""
    if cfg.model_config:
        return
    from workload.model import architectures, model_source
    what = f"--model_id {cfg.model_id}"
    try:
        if (architectures.published(cfg.model_id) is None and not model_source.is_path(cfg.model_id)
                and "://" not in cfg.model_id):
            shutil.rmtree(model_source.hub_config_directory(cfg.model_id), ignore_errors=True)
        what = f"--tokenizer {cfg.tokenizer}" if cfg.tokenizer else what  # the flag naming the repo asked next
        model_source.check_hub_reachable(cfg.tokenizer_name)
    except (model_source.Unreachable, model_source.NeedsToken) as error:
        raise cli.EnvironmentProblem(f"{what}: {error}") from None
    except ValueError as error:
        raise cli.UsageError(f"{what}: {error}") from None


def generate(model_directory: str, prompt: str, new_tokens: int = NEW_TOKENS) -> str:
    """The exported model, loaded as anyone would load it, continuing `prompt` greedily."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers.utils import logging as transformers_logging

    from workload.model.adapters.nf4 import import_torchao_quietly

    import_torchao_quietly()  # from_pretrained imports it where installed (--method qlora, --fp8)
    transformers_logging.disable_progress_bar()  # "Loading weights": noise here
    tokenizer = AutoTokenizer.from_pretrained(model_directory)
    model = AutoModelForCausalLM.from_pretrained(model_directory)
    inputs = tokenizer(prompt, return_tensors="pt")
    with torch.no_grad():
        output = model.generate(**inputs, max_new_tokens=new_tokens, do_sample=False)
    return tokenizer.decode(output[0], skip_special_tokens=True)


def generate_chat(model_directory: str, messages: list[dict], new_tokens: int = 2 * NEW_TOKENS) -> str:
    """The exported model answering `messages` as any chat client would ask it: through the exported tokenizer's
    chat template with the generation prompt, greedily, until its end of turn; the answer alone."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers.utils import logging as transformers_logging

    from workload.model.adapters.nf4 import import_torchao_quietly

    import_torchao_quietly()  # from_pretrained imports it where installed (--method qlora, --fp8)
    transformers_logging.disable_progress_bar()
    tokenizer = AutoTokenizer.from_pretrained(model_directory)
    model = AutoModelForCausalLM.from_pretrained(model_directory)
    inputs = tokenizer.apply_chat_template(messages, add_generation_prompt=True, return_tensors="pt", return_dict=True)
    with torch.no_grad():
        output = model.generate(**inputs, max_new_tokens=new_tokens, do_sample=False)
    return tokenizer.decode(output[0, inputs["input_ids"].shape[1]:], skip_special_tokens=True)

