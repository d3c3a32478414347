"""The training runs on the stack's RayCluster, from your machine: list them, follow one, read its summary, stop it.

    pulumi stack output kubeconfig --show-secrets > kubeconfig.json   # once per cluster
    python -m tools.job list --kubeconfig kubeconfig.json --stack dev
    python -m tools.job logs --follow --kubeconfig kubeconfig.json --stack dev
    python -m tools.job summary --kubeconfig kubeconfig.json --stack dev
    python -m tools.job stop --kubeconfig kubeconfig.json --stack dev
    python -m tools.job submit --kubeconfig kubeconfig.json --stack dev -- --steps 200   # another run
    python -m tools.job submit --stack dev --config run.yaml --print_config   # its settings as a file

JOB (after the command) is a submission id, `pulumi stack output jobId` or the first column of `list`; without
it, the stack's newest job. `logs --follow` streams the log until the job ends (Ctrl-C stops following, not the
job); `summary` prints the job's TRAIN_SUMMARY (loss, tokens/s, checkpoint) and every rank's NCCL transport;
`stop` stops it and waits until it has. No kubectl: the kubeconfig (as tools.status reads it), the RayCluster's
token from its Secret and a port-forward to the head's job server all go through the Kubernetes API.
"""
from __future__ import annotations

import argparse
import json
import re
import sys
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, ContextManager, Sequence

from infra.job.job_server import JobServer
from infra.job.ray_job import RUN_METADATA
from tools import job_submit
from tools.job_server import connect, job_server, stack_jobs
from tools.job_submit import submit_command
from tools.kube import api_client
from tools.stack import stack_settings
from tools.stack_name import add_stack_flag
from workload import cli, config_file
from workload.run import credential_files

# `stop` waits this long for the job to end: Ray sends its driver SIGTERM, then SIGKILL a few seconds later.
STOP_WAIT_S = 60
# Between two attempts to stream the log again, once the stream has dropped.
RECONNECT_S = 5.0

# (the parsed flags) -> a context in which the job server answers. Tests pass their own.
JobServerConnector = Callable[[argparse.Namespace], ContextManager[JobServer]]


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = cli.parser("python -m tools.job", __doc__,
                        check_failed="the job failed or was stopped, has no summary yet, or the stack has no job")
    # Before the command (`tools.job --kubeconfig k.yaml list`) or after it, as the docs write it: the command's own
    # copies default to SUPPRESS, so one left unset there keeps the value given before the command.
    kubeconfig_help = "kubeconfig file; unset: $KUBECONFIG or ~/.kube/config"
    stack_help = "the stack's RayCluster (Pulumi.<stack>.yaml) and only its jobs"
    parser.add_argument("--kubeconfig", type=Path, help=kubeconfig_help)
    add_stack_flag(parser, help=stack_help)
    common = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
    common.add_argument("--kubeconfig", type=Path, default=argparse.SUPPRESS, help=kubeconfig_help)
    add_stack_flag(common, default=argparse.SUPPRESS, help=stack_help)
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    helps = {"list": "the stack's jobs, oldest first", "logs": "a job's log (--follow: until it ends)",
             "summary": "a job's TRAIN_SUMMARY and NCCL transport", "stop": "stop a job and wait until it has",
             "submit": "start another run with the stack's train* settings and the flags after --"}
    for name, text in helps.items():
        command = commands.add_parser(name, parents=[common], help=text, description=text, epilog=parser.epilog,
                                      formatter_class=parser.formatter_class, allow_abbrev=False)
        if name == "submit":
            command.add_argument("--run-id", help="the run's id (names its submission and checkpoints); "
                                                  "unset: submit-<UTC date>-<time>")
            config_file.add_options(command)
            command.add_argument("train_flags", nargs=argparse.REMAINDER, metavar="-- FLAGS",
                                 help="python -m workload.train flags over the stack's, e.g. -- --steps 200")
        elif name != "list":
            command.add_argument("job", nargs="?", metavar="JOB", type=job_id,
                                 help="submission id; default: the newest job")
        if name == "logs":
            command.add_argument("-f", "--follow", action="store_true", help="stream the log until the job ends")
    args, unknown = parser.parse_known_args(argv)
    if unknown:
        _refuse_unknown(parser, args, unknown)
    return args


# What a JOB may be, as the job server names its jobs: Ray's own submission ids ('raysubmit_' and 16 letters and digits:
# ray/dashboard/modules/job/job_manager.py generate_job_id), a driver's job id (hex), and this project's
# ('raytrain-<stack>-<run id>-<8 hex>': infra/job/job_config.py submission_id, from a stack name of at most 100
# characters and a run id of at most 32, both of letters, digits, '.', '_' and '-'). JOB goes into the Jobs API's
# URL path (/api/jobs/<JOB>/logs: ray/dashboard/modules/job/sdk.py), so '/', '..', '%' and control characters
# would make it another request: refused, as is a value longer than any of these, before any request.
# A first character that is a letter or a digit: '.' alone is a path segment too (/api/jobs/./logs is /api/jobs/logs).
JOB_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,159}")
JOB_ID_ALLOWED = ("a submission id from `python -m tools.job list` (raysubmit_..., raytrain-<stack>-<run>-...): 1-160 "
                  "letters, digits, '_', '-' or '.', the first a letter or digit, no '..'")


def job_id(value: str) -> str:
    """argparse's type for JOB: a blank one (`tools.job stop "$JOB"` with JOB unset) is refused, not taken as "none
    given", which means the stack's newest job: `stop` would have ended a job nobody named; and one that is no job
    id (JOB_ID) is refused unsent, named by its length only when it is long."""
    if not value.strip():
        raise argparse.ArgumentTypeError("is empty (an unset shell variable?); give a submission id from `python -m "
                                         "tools.job list`, or leave JOB out for the stack's newest job")
    if not JOB_ID.fullmatch(value) or ".." in value:
        got = f"got {value}" if len(value) <= 60 and value.isprintable() else f"got a value of {len(value):,} characters"
        raise argparse.ArgumentTypeError(f"must be {JOB_ID_ALLOWED}; {got}")
    return value


def _refuse_unknown(parser: argparse.ArgumentParser, args: argparse.Namespace, unknown: list[str]) -> None:
    """A training flag given to `submit` before its `--` (`submit --stack dev --steps 200`) is named with where it
    goes; anything else is argparse's own refusal."""
    from workload.config import DECLARED, aliases

    name = unknown[0][2:].partition("=")[0].replace("-", "_") if unknown[0].startswith("--") else ""
    if args.command == "submit" and aliases.ours(name) in {declared.name for declared in DECLARED}:
        stack = f" --stack {args.stack}" if args.stack else ""
        # argparse hands the value after an unknown flag (`--steps 200`) to the remainder: it goes back beside its flag.
        flags = [*unknown, *(arg for arg in args.train_flags if arg != "--")]
        raise cli.UsageError(f"{unknown[0]} is a training flag: give the job's flags after --, as `python -m tools.job "
                             f"submit{stack} -- {' '.join(flags)}`")
    flag = unknown[0].partition("=")[0]
    owners = [command for command, sub in _commands(parser).items() if flag in sub._option_string_actions]
    if flag.startswith("-") and owners:  # the flag of another command (`summary --follow`: logs')
        raise cli.UsageError(f"{flag} is a flag of `{' / '.join(owners)}`, not of `{args.command}`: "
                             f"`python -m tools.job {owners[0]} --help` tells what it does")
    parser.error(f"unrecognized arguments: {' '.join(unknown)}")


def _commands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    """The parser's commands, by name, as its subparsers action holds them."""
    return next((dict(action.choices) for action in parser._actions
                 if isinstance(action, argparse._SubParsersAction)), {})


def kubernetes_job_server(args: argparse.Namespace) -> ContextManager[JobServer]:
    """The job server of --stack's RayCluster, through --kubeconfig."""
    namespace, cluster = stack_settings(args.stack)  # a bad --stack is the user's mistake (2) before any kubeconfig
    return job_server(api_client(args.kubeconfig), namespace, cluster)


def chosen_job(client: Any, args: argparse.Namespace) -> Any:
    from workload.run import submit

    if args.job:
        job = submit.job_info(client, args.job)
        if job is None:
            raise cli.UsageError(f"JOB {args.job}: the job server has no such job",
                                 hint="`python -m tools.job list` shows the stack's jobs")
        return job
    jobs = stack_jobs(client, args.stack)
    if not jobs:
        raise cli.CheckFailed(f"no training job{' of stack ' + args.stack if args.stack else ''} on this RayCluster",
                              hint="`pulumi config set trainEnabled true && pulumi up` starts one")
    return jobs[-1]


def _when(milliseconds: int | None) -> str:
    if not milliseconds:
        return "-"
    return datetime.fromtimestamp(milliseconds / 1000, timezone.utc).strftime("%Y-%m-%d %H:%M:%S")


def _duration(job: Any) -> str:
    if not job.start_time:
        return "-"
    end = job.end_time or time.time() * 1000
    return str(int(end - job.start_time) // 1000 // 60) + " min"


def list_command(client: Any, args: argparse.Namespace) -> int:
    jobs = stack_jobs(client, args.stack)
    if not jobs:
        print(f"No training jobs{' of stack ' + args.stack if args.stack else ''}.")
        return cli.OK
    rows = [[job.submission_id, job.status.value, (job.metadata or {}).get(RUN_METADATA, "?"), _when(job.start_time),
             _duration(job)] for job in jobs]
    print("\n".join(cli.table([["JOB", "STATUS", "RUN", "STARTED (UTC)", "RAN"]] + rows)))
    return cli.OK


def logs_command(client: Any, args: argparse.Namespace) -> int:
    from workload.run import submit

    job = chosen_job(client, args)
    if not args.follow:
        print(client.get_job_logs(job.submission_id), end="", flush=True)
        return cli.OK
    shown = 0
    try:
        while True:
            followed = submit.follow_log(client, job.submission_id, lambda line: print(line, flush=True), None,
                                         skip=shown)
            shown = max(shown, followed.lines)
            status = client.get_job_status(job.submission_id)
            if status in submit.TERMINAL:
                break
            # The stream dropped (or closed a moment before the status turned): stream again, past what was shown.
            time.sleep(RECONNECT_S if followed.lost else 0.5)
    except KeyboardInterrupt:
        print(f"stopped following; job {job.submission_id} runs on (`python -m tools.job stop` ends it)",
              file=sys.stderr)
        raise
    return _ended(client, job.submission_id, status)


def _ended(client: Any, job_id: str, status: Any) -> int:
    if status.value == "SUCCEEDED":
        print(f"job {job_id} SUCCEEDED", flush=True)
        return cli.OK
    message = client.get_job_info(job_id).message
    raise cli.CheckFailed(f"job {job_id} {status.value}" + (f": {message}" if message else ""))


def summary_command(client: Any, args: argparse.Namespace) -> int:
    from workload.fabric import transport
    from workload.run import submit

    job = chosen_job(client, args)
    logs = client.get_job_logs(job.submission_id)
    summary = submit.parse_summary(logs)
    report = summary or submit.parse_transport(logs) or {}
    progress = [line for line in logs.splitlines() if " loss " in line and "step " in line]
    print(json.dumps({
        "job_id": job.submission_id,
        "status": job.status.value,
        "run_id": (job.metadata or {}).get(RUN_METADATA),
        **{key: (summary or {}).get(key) for key in ("final_loss", "tokens_per_s", "mfu", "steps", "world_size",
                                                     "device", "checkpoint")},
        "verdicts": transport.verdicts_from_summary(report, logs) if report else {},
        "last_progress": progress[-1].split(") ", 1)[-1] if progress else None,
    }, indent=2))
    if summary is None:
        raise cli.CheckFailed(f"job {job.submission_id} is {job.status.value} and has printed no TRAIN_SUMMARY yet")
    return cli.OK


def stop_command(client: Any, args: argparse.Namespace) -> int:
    from workload.run import submit

    job = chosen_job(client, args)
    if job.status in submit.TERMINAL:
        print(f"job {job.submission_id} already {job.status.value}: nothing to stop")
        return cli.OK
    client.stop_job(job.submission_id)
    try:
        status = submit.wait_for_status(client, job.submission_id, time.monotonic() + STOP_WAIT_S)
    except TimeoutError:
        status = client.get_job_status(job.submission_id)
        raise cli.CheckFailed(f"job {job.submission_id} is still {status.value} {STOP_WAIT_S} s after stop") from None
    print(f"job {job.submission_id} {status.value}")
    return cli.OK


COMMANDS = {"list": list_command, "logs": logs_command, "summary": summary_command, "stop": stop_command,
            "submit": submit_command}


def main(argv: Sequence[str] | None = None, job_server: JobServerConnector | None = None) -> int:
    args = parse_args(argv)
    if args.command == "submit":
        job_submit.prepare(args)
        if args.print_config:  # the job's settings as a --config file, for a local replay: no cluster needed
            print(config_file.render(args.prepared[1]["workload"]), end="", flush=True)
            return cli.OK
    # The job client's requests read $NETRC before each (workload/run/submit.py connect checks it too): refused here
    # before the port-forward starts, not after.
    credential_files.check()
    with (job_server or kubernetes_job_server)(args) as server:
        return COMMANDS[args.command](connect(server), args)


if __name__ == "__main__":
    sys.exit(cli.run(main))
