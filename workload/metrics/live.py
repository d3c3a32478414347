"""The job's own throughput as Ray metrics, so Prometheus (infra/kubernetes/monitoring.py) and the training dashboard
see it live: rank 0's tokens/s and step time, the same figures as its progress line, through Ray's metrics agent on its
node (exported as ray_raytrain_tokens_per_second and ray_raytrain_step_time_seconds on the node's metrics port).

Gauges, not histograms: one value per step is what the panel plots, and a gauge's series is one per run.
"""
from __future__ import annotations

TOKENS_PER_SECOND = "raytrain_tokens_per_second"
STEP_TIME_SECONDS = "raytrain_step_time_seconds"


class LiveMetrics:
    """Rank 0's gauges, tagged with the run's name (several runs on one cluster stay apart)."""

    def __init__(self, run_name: str) -> None:
        from ray.util.metrics import Gauge

        tags = ("run",)
        self._tags = {"run": run_name or "run"}
        self._tokens = Gauge(TOKENS_PER_SECOND, description="Training tokens per second (rank 0, last step)",
                             tag_keys=tags)
        self._step_time = Gauge(STEP_TIME_SECONDS, description="Seconds per optimizer step (rank 0, last step)",
                                tag_keys=tags)

    def record(self, tokens_per_s: float, step_time_s: float) -> None:
        self._tokens.set(tokens_per_s, tags=self._tags)
        self._step_time.set(step_time_s, tags=self._tags)
