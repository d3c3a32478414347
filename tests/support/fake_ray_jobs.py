"""A stand-in for the Ray head's job server, for the README's long-run journey (tests/docs/test_readme.py).

It speaks the Ray Jobs API as Ray 2.60's JobSubmissionClient calls it (version check, package upload, submit,
job details, list, logs, the log-tail websocket, stop; a bearer token on every request), so the Pulumi job
provider and `python -m tools.job` run unchanged against it. What is not real is the job: it trains nothing and
replays the log a real one prints (progress lines, rank 0's TRAIN_TRANSPORT report with the NCCL lines of an EFA
job over 2 x g6.12xlarge, the TRAIN_SUMMARY), and its clock is its followers: it runs as far as its transport
report while the first follower (`pulumi up`) streams its log, stands still there, and runs to its end while the
next follower (`tools.job logs --follow`) streams it. So the journey sees it running, then finished, without
depending on timing. (A follower that waits for the end before anyone has followed past the report, as
trainWait finish does, would wait for good: this stand-in serves the long-run journey only.)

tests/runs/test_ray_job.py runs the same provider and commands against a real Ray head and a real training job.
"""
from __future__ import annotations

import asyncio
import json
import shlex
import threading
import time
from dataclasses import dataclass, field

from aiohttp import web

from tests.support.fake_nccl_logs import nccl_job
from workload.config import SUMMARY_PREFIX, TRANSPORT_PREFIX
from workload.fabric import transport

RAY_VERSION = "2.60.0"
WORKER_PREFIX = "(RayTrainWorker pid=4242) "


def efa_nccl_logs() -> dict[str, str]:
    """Every rank's transport lines, as a 2 x g6.12xlarge job over EFA reports them."""
    return {str(rank.rank): "\n".join(filter(transport.is_transport_line, rank.lines)) for rank in nccl_job()}


def training_log(entrypoint: str) -> list[str]:
    """The lines `python3 -m workload.train` prints on the cluster for the entrypoint's --steps."""
    args = shlex.split(entrypoint)
    steps = int(args[args.index("--steps") + 1]) if "--steps" in args else 50
    lines = [f"{WORKER_PREFIX}training Qwen/Qwen2.5-1.5B on 8 x cuda, steps 1..{steps}"]
    for step in range(1, steps + 1):
        loss = 3.0 - step / steps
        lines.append(f"{WORKER_PREFIX}step {step}/{steps} loss {loss:.4f} step_time 0.420s tokens/s 78,000 mfu 31.0%")
        if step == min(2, steps):
            report = {"step": step, "world_size": 8, "device": "cuda", "nccl_logs": efa_nccl_logs()}
            lines.append(WORKER_PREFIX + TRANSPORT_PREFIX + json.dumps(report))
    summary = {"world_size": 8, "device": "cuda", "steps": steps, "final_loss": 2.0, "tokens_per_s": 78000.0,
               "mfu": 0.31, "start_step": 0, "diverged_at_step": None, "checkpoint": None,
               "nccl_logs": efa_nccl_logs()}
    return lines + [SUMMARY_PREFIX + json.dumps(summary)]


@dataclass
class FakeJob:
    submission_id: str
    entrypoint: str
    metadata: dict
    lines: list[str]
    shown: int = 0
    status: str = "RUNNING"
    start_time: int = field(default_factory=lambda: int(time.time() * 1000))
    end_time: int | None = None

    @property
    def report_line(self) -> int:
        return next(i for i, line in enumerate(self.lines) if TRANSPORT_PREFIX in line)

    def advance(self) -> str | None:
        """The job's next line; None when it has ended."""
        if self.status != "RUNNING":
            return None
        self.shown += 1
        if self.shown == len(self.lines):
            self.status, self.end_time = "SUCCEEDED", int(time.time() * 1000)
        return self.lines[self.shown - 1]

    def details(self) -> dict:
        return {"type": "SUBMISSION", "job_id": None, "submission_id": self.submission_id, "status": self.status,
                "entrypoint": self.entrypoint, "message": None, "start_time": self.start_time,
                "end_time": self.end_time, "metadata": self.metadata, "runtime_env": {}}


class FakeRayJobServer:
    """The job server on 127.0.0.1:<free port>, in a thread of its own; `address` for JobSubmissionClient."""

    def __init__(self, token: str) -> None:
        self.token = token
        self.jobs: dict[str, FakeJob] = {}
        self.packages: set[str] = set()
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self.port = 0

    def __enter__(self) -> FakeRayJobServer:
        self._thread.start()
        self._ready.wait(30)
        return self

    def __exit__(self, *exc: object) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(30)

    @property
    def address(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _serve(self) -> None:
        asyncio.set_event_loop(self._loop)
        # The dashboard's body limit, as Ray's head sets it (ray/dashboard/http_server_head.py: client_max_size=
        # ray_constants.DASHBOARD_CLIENT_MAX_SIZE, 100 MiB): aiohttp's own default of 1 MiB is stricter than Ray, and
        # the working_dir's zip (stored, not compressed: ray/_private/runtime_env/packaging.py) passed 1 MiB.
        app = web.Application(middlewares=[self._authenticate], client_max_size=100 * 1024**2)
        app.add_routes([
            web.get("/api/version", self._version),
            web.get("/api/packages/{protocol}/{name}", self._package),
            web.put("/api/packages/{protocol}/{name}", self._upload),
            web.post("/api/jobs/", self._submit),
            web.get("/api/jobs/", self._list),
            web.get("/api/jobs/{id}", self._details),
            web.get("/api/jobs/{id}/logs", self._logs),
            web.get("/api/jobs/{id}/logs/tail", self._tail),
            web.post("/api/jobs/{id}/stop", self._stop),
        ])
        runner = web.AppRunner(app)
        self._loop.run_until_complete(runner.setup())
        site = web.TCPSite(runner, "127.0.0.1", 0)
        self._loop.run_until_complete(site.start())
        self.port = site._server.sockets[0].getsockname()[1]
        self._ready.set()
        self._loop.run_forever()
        self._loop.run_until_complete(runner.cleanup())

    @web.middleware
    async def _authenticate(self, request, handler):
        if request.headers.get("Authorization") != f"Bearer {self.token}":
            return web.Response(status=401, text="Unauthorized: missing or invalid token")
        return await handler(request)

    def _job(self, request) -> FakeJob:
        job = self.jobs.get(request.match_info["id"])
        if job is None:
            raise web.HTTPNotFound(text=f"Job {request.match_info['id']} does not exist")
        return job

    async def _version(self, request):
        return web.json_response({"version": "4", "ray_version": RAY_VERSION, "ray_commit": "stand-in"})

    async def _package(self, request):
        return web.Response(status=200 if request.match_info["name"] in self.packages else 404)

    async def _upload(self, request):
        await request.read()
        self.packages.add(request.match_info["name"])
        return web.Response(status=200)

    async def _submit(self, request):
        body = await request.json()
        submission_id = body.get("submission_id") or f"raysubmit_{len(self.jobs) + 1}"
        if submission_id in self.jobs:
            return web.Response(status=400, text=f"Job with submission_id {submission_id} already exists. "
                                                 "Please use a different submission_id.")
        self.jobs[submission_id] = FakeJob(submission_id, body["entrypoint"], body.get("metadata") or {},
                                           training_log(body["entrypoint"]))
        return web.json_response({"job_id": submission_id, "submission_id": submission_id})

    async def _list(self, request):
        return web.json_response([job.details() for job in self.jobs.values()])

    async def _details(self, request):
        return web.json_response(self._job(request).details())

    async def _logs(self, request):
        job = self._job(request)
        return web.json_response({"logs": "".join(line + "\n" for line in job.lines[:job.shown])})

    async def _tail(self, request):
        job = self._job(request)
        socket = web.WebSocketResponse()
        await socket.prepare(request)
        for line in job.lines[:job.shown]:
            await socket.send_str(line + "\n")
        # Before its report the job runs up to it; once the report is out, to its end.
        until = len(job.lines) if job.shown > job.report_line else job.report_line + 1
        while job.shown < until and (line := job.advance()) is not None:
            await socket.send_str(line + "\n")
        if job.status == "RUNNING":
            await socket.receive()  # standing at its report until this follower has seen enough and closes
        await socket.close()
        return socket

    async def _stop(self, request):
        job = self._job(request)
        stopped = job.status == "RUNNING"
        if stopped:
            job.status, job.end_time = "STOPPED", int(time.time() * 1000)
        return web.json_response({"stopped": stopped})

