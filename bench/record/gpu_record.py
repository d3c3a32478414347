"""A healthy run's GPU panels, recorded for real: the job's training step on this machine's GPU, sampled each second
the way the DCGM exporter samples it, written as the training dashboard's panels (infra/monitoring.TRAINING_PANELS).

    python3 -m bench.record.gpu_record --output bench/results/gpu_panel-h200-2026-12-01.json     # on a GPU machine
    python -m tools.gpu_panel bench/results/gpu_panel-h200-2026-12-01.json --out docs/gpu-panel.svg

The run: idle for --idle_s, then train_func's loop by hand (the model build, FSDP2 shard, optimizer and train_step
that the job runs; random tokens, as the benchmarks use) for --train_s, then idle again, so the picture shows the
GPUs going busy and coming back. A thread reads NVML once a second, the library the DCGM exporter's fields come from
(dcgm-exporter's default-counters.csv names them, with their units):
  DCGM_FI_DEV_GPU_UTIL   nvmlDeviceGetUtilizationRates().gpu, percent
  DCGM_FI_DEV_FB_USED    nvmlDeviceGetMemoryInfo().used, MiB (the dashboard multiplies by 1048576)
  DCGM_FI_DEV_POWER_USAGE nvmlDeviceGetPowerUsage(), W (NVML gives mW)
  DCGM_FI_DEV_SM_CLOCK   nvmlDeviceGetClockInfo(SM), MHz
  DCGM_FI_DEV_XID_ERRORS the last XID event NVML delivered (nvmlDeviceRegisterEvents, XidCriticalError), else 0
  DCGM_FI_PROF_PIPE_TENSOR_ACTIVE NVML's GPU performance monitoring (GPM, Hopper and later): ANY_TENSOR_UTIL / 100
Where the machine refuses one (a VM may hide XID events or GPM), that panel is left out and the file says why.
The job panels are rank 0's own figures per step, the values its Ray gauges carry (workload/metrics/live.py).

The file is the training dashboard as Prometheus would answer it: for each panel title, the metric its query reads
and the `result` list of a `query_range` answer of type matrix ({"metric": {labels}, "values": [[unix_time, "value"],
...]}), as in the Prometheus HTTP API's documentation
(https://prometheus.io/docs/prometheus/latest/querying/api/#range-queries).
"""
from __future__ import annotations

import argparse
import json
import os
import socket
import threading
import time

from bench.common import announce, benchmark_parser

# The training dashboard's panel titles (infra/monitoring.TRAINING_PANELS, whose module needs Pulumi, absent on a GPU
# machine) and the metric each one's query reads; tests/docs/test_gpu_panel.py holds the two lists equal.
PANEL_METRICS = {
    "GPU utilization": "DCGM_FI_DEV_GPU_UTIL",
    "Tensor core activity": "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE",
    "GPU memory used": "DCGM_FI_DEV_FB_USED",
    "GPU power": "DCGM_FI_DEV_POWER_USAGE",
    "SM clock": "DCGM_FI_DEV_SM_CLOCK",
    "XID errors": "DCGM_FI_DEV_XID_ERRORS",
    "Job tokens/s": "ray_raytrain_tokens_per_second",
    "Job step time": "ray_raytrain_step_time_seconds",
}


def nvml_fields(pynvml, handle) -> dict[str, float]:
    """One sample of the panels NVML reads directly (the first four fields in the docstring), in the units the
    panels' queries return: memory in bytes (DCGM's whole MiB times 1048576, as the panel's query multiplies)."""
    return {
        "GPU utilization": float(pynvml.nvmlDeviceGetUtilizationRates(handle).gpu),
        "GPU memory used": float(pynvml.nvmlDeviceGetMemoryInfo(handle).used // 2**20 * 2**20),
        "GPU power": pynvml.nvmlDeviceGetPowerUsage(handle) / 1000,
        "SM clock": float(pynvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_SM)),
    }


class Sampler(threading.Thread):
    """Samples every GPU once each `interval` seconds until stopped; series per panel title, per GPU."""

    def __init__(self, interval: float) -> None:
        super().__init__(daemon=True)
        import pynvml

        self.pynvml, self.interval, self.stopped = pynvml, interval, threading.Event()
        pynvml.nvmlInit()
        self.handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(pynvml.nvmlDeviceGetCount())]
        self.node = socket.gethostname()
        self.series: dict[str, dict[int, list[list]]] = {}
        self.unavailable: dict[str, str] = {}
        self.events = self._xid_events()
        self.gpm = self._gpm_samples()

    def _xid_events(self):
        try:
            events = self.pynvml.nvmlEventSetCreate()
            for handle in self.handles:
                self.pynvml.nvmlDeviceRegisterEvents(handle, self.pynvml.nvmlEventTypeXidCriticalError, events)
            return events
        except self.pynvml.NVMLError as error:
            self.unavailable["XID errors"] = f"NVML refused XID event registration here: {error}"
            return None

    def _gpm_samples(self):
        try:
            if not all(self.pynvml.nvmlGpmQueryDeviceSupport(h).isSupportedDevice for h in self.handles):
                raise self.pynvml.NVMLError(self.pynvml.NVML_ERROR_NOT_SUPPORTED)
            return [self.pynvml.nvmlGpmSampleGet(h, self.pynvml.nvmlGpmSampleAlloc()) for h in self.handles]
        except self.pynvml.NVMLError as error:
            self.unavailable["Tensor core activity"] = f"NVML's GPM is not available here: {error}"
            return None

    def _tensor_active(self, index: int) -> float:
        """The tensor pipes' busy share since the last sample (GPM needs two samples), as DCGM's 0..1 ratio."""
        pynvml, handle = self.pynvml, self.handles[index]
        sample = pynvml.nvmlGpmSampleGet(handle, pynvml.nvmlGpmSampleAlloc())
        request = pynvml.c_nvmlGpmMetricsGet_t()
        request.version, request.numMetrics = pynvml.NVML_GPM_METRICS_GET_VERSION, 1
        request.sample1, request.sample2 = self.gpm[index], sample
        request.metrics[0].metricId = pynvml.NVML_GPM_METRIC_ANY_TENSOR_UTIL
        value = pynvml.nvmlGpmMetricsGet(request).metrics[0].value
        pynvml.nvmlGpmSampleFree(self.gpm[index])
        self.gpm[index] = sample
        return value / 100

    def _last_xid(self, last: dict[int, int]) -> dict[int, int]:
        while self.events is not None:
            try:
                event = self.pynvml.nvmlEventSetWait(self.events, 0)
            except self.pynvml.NVMLError:  # NVML_ERROR_TIMEOUT: nothing pending
                return last
            index = next(i for i, h in enumerate(self.handles)
                         if self.pynvml.nvmlDeviceGetIndex(h) == self.pynvml.nvmlDeviceGetIndex(event.device))
            last[index] = int(event.eventData)
        return last

    def add(self, title: str, gpu: int, when: float, value: float) -> None:
        self.series.setdefault(title, {}).setdefault(gpu, []).append([round(when, 3), f"{value:.6g}"])

    def run(self) -> None:
        xids: dict[int, int] = {}
        while not self.stopped.wait(self.interval):
            when = time.time()
            xids = self._last_xid(xids)
            for index, handle in enumerate(self.handles):
                for title, value in nvml_fields(self.pynvml, handle).items():
                    self.add(title, index, when, value)
                if self.gpm is not None:
                    self.add("Tensor core activity", index, when, self._tensor_active(index))
                if self.events is not None:
                    self.add("XID errors", index, when, xids.get(index, 0))

    def matrix(self, title: str) -> list[dict]:
        return [{"metric": {"node": self.node, "gpu": str(gpu)}, "values": values}
                for gpu, values in sorted(self.series.get(title, {}).items())]


def train_for(seconds: float, cfg, on_step, device: str = "cuda") -> None:
    """train_func's loop by hand on GPU 0 (bench.record.ray_overhead's raw loop), stopping once `seconds` have passed or
    on_step(unix_time, tokens_per_s, step_time_s), called after each step as rank 0 sets its gauges, returns False.
    `device` cpu: a smoke run (gloo)."""
    import torch.distributed as dist

    from bench.common import device_from_flag, single_process_group
    from workload.data.batches import make_data
    from workload.model.build import build_model
    from workload.model.optimizer import build_optimizer
    from workload.model.sharding import build_mesh, shard_model
    from workload.model.step import train_step

    where = device_from_flag(device)
    single_process_group(where, port=29517)
    try:
        model = shard_model(build_model(cfg, where), build_mesh(where), cfg)
        optimizer = build_optimizer(model, cfg)
        batches = make_data(cfg, model.lm.config.vocab_size, 0, 1).train
        began, step = time.perf_counter(), 0
        while time.perf_counter() - began < seconds:
            started = time.perf_counter()
            loss = train_step(model, optimizer, batches(step).to(where), cfg)
            dist.all_reduce(loss, op=dist.ReduceOp.SUM)
            loss.item()
            elapsed = time.perf_counter() - started
            step += 1
            if on_step(time.time(), cfg.batch_size * cfg.seq_len / elapsed, elapsed) is False:
                break
    finally:
        dist.destroy_process_group()


def build_parser() -> argparse.ArgumentParser:
    parser = benchmark_parser(__doc__, device=None, steps=None)
    parser.add_argument("--output", required=True, help="the recording (JSON) to write")
    parser.add_argument("--idle_s", type=float, default=15)
    parser.add_argument("--train_s", type=float, default=150)
    parser.add_argument("--interval", type=float, default=1.0, help="seconds between samples (Prometheus: 15 s)")
    return parser


def main(argv: list[str] | None = None) -> None:
    from workload.config import TrainConfig

    args = build_parser().parse_args(argv)
    announce()
    cfg = TrainConfig(model_config=args.model_config, batch_size=args.batch_size, seq_len=args.seq_len,
                      steps=10**6, num_workers=1)

    sampler = Sampler(args.interval)
    job: dict[str, list[list]] = {"Job tokens/s": [], "Job step time": []}

    def on_step(when: float, tokens_per_s: float, step_time_s: float) -> None:
        job["Job tokens/s"].append([round(when, 3), f"{tokens_per_s:.6g}"])
        job["Job step time"].append([round(when, 3), f"{step_time_s:.6g}"])
        if len(job["Job tokens/s"]) % 20 == 1:
            print(f"step {len(job['Job tokens/s'])}: {tokens_per_s:,.0f} tokens/s", flush=True)

    started = time.time()
    sampler.start()
    time.sleep(args.idle_s)
    train_for(args.train_s, cfg, on_step)
    time.sleep(args.idle_s)
    sampler.stopped.set()
    sampler.join()

    import torch

    results = {title: sampler.matrix(title) for title in PANEL_METRICS if sampler.series.get(title)}
    for title, values in job.items():  # rank 0's gauges carry no GPU label (live_metrics.py), only the node
        results[title] = [{"metric": {"node": sampler.node}, "values": values}]
    panels = {title: {"metric": PANEL_METRICS[title], "result": result} for title, result in results.items()}
    recording = {
        "what": (f"{cfg.model_config}, batch {cfg.batch_size} x {cfg.seq_len}, one process on GPU 0 of "
                 f"{len(sampler.handles)}: idle {args.idle_s:g} s, train {args.train_s:g} s, idle {args.idle_s:g} s"),
        "gpu": torch.cuda.get_device_name(0), "driver": sampler.pynvml.nvmlSystemGetDriverVersion(),
        "torch": torch.__version__, "interval_s": args.interval, "started": round(started, 3),
        "steps": len(job["Job tokens/s"]), "panels": panels,
        "not_recorded": {**sampler.unavailable,
                         "Node network (pod network)": "one machine, no pod network: nothing crosses a node"},
    }
    with open(args.output, "w") as file:
        json.dump(recording, file, indent=1)
        file.write("\n")
    print(json.dumps({key: value for key, value in recording.items() if key != "panels"}), flush=True)
    print(f"wrote {args.output}: {', '.join(panels)}", flush=True)
    os._exit(0)  # the compiled step's worker threads can hold a normal exit


if __name__ == "__main__":
    main()
