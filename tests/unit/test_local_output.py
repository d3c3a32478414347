"""The local run's quiet output: the project's own lines from a job's log, Ray's and libraries' left for --verbose, a
recap before the summary, a failure said once. The log lines below are copied from a real local run's log
(Ray 2.60, 2026-12-01), colours included."""
from __future__ import annotations

import re
from pathlib import Path

from workload.run import output as local_output

REPO = Path(__file__).resolve().parents[2]
OURS = {
    "submitted Ray job raysubmit_d6cf2cAz1XiY8rW6 to http://127.0.0.1:42579":
        "submitted Ray job raysubmit_d6cf2cAz1XiY8rW6 to http://127.0.0.1:42579",
    "\x1b[36m(RayTrainWorker pid=26491)\x1b[0m step 1/40 loss 6.2774 lr 1.25e-03 batch 8 step_time 1.345s tokens/s 381 "
    "mfu n/a": "step 1/40 loss 6.2774 lr 1.25e-03 batch 8 step_time 1.345s tokens/s 381 mfu n/a",
    "(RayTrainWorker pid=26491) step 10/40 eval_loss 2.8122": "step 10/40 eval_loss 2.8122",
    "\x1b[36m(RayTrainWorker pid=26491)\x1b[0m fabric check over 2 ranks (0.5 s): bus bandwidth GB/s at 1 MiB":
        "fabric check over 2 ranks (0.5 s): bus bandwidth GB/s at 1 MiB",
    "error: training diverged: the loss was not finite at step 3": "error: training diverged: the loss was not finite "
                                                                   "at step 3",
    # What the examples became (workload/data/examples.py), shown by default as the README's data section says.
    "(RayTrainWorker pid=26491) chat data: 96 training examples, 24 held out for evaluation, packed into 72 blocks "
    "of 128 tokens; 0 longer than that, truncated to their first 128 tokens; 0 without a trained token dropped; loss "
    "on assistant tokens only": "chat data: 96 training examples, 24 held out for evaluation, packed into 72 blocks "
    "of 128 tokens; 0 longer than that, truncated to their first 128 tokens; 0 without a trained token dropped; loss "
    "on assistant tokens only",
}
RAYS = [
    "2026-12-01 15:59:48,345\tINFO job_manager.py:581 -- Runtime env is setting up.",
    "Running entrypoint for job raysubmit_d6cf2cAz1XiY8rW6: python3 -m workload.train --model_config tiny --steps 40",
    "\x1b[36m(TrainController pid=26168)\x1b[0m Requesting resources: {'CPU': 1} * 2",
    "\x1b[36m(TrainController pid=26168)\x1b[0m - (ip=192.0.2.2, pid=26491) world_rank=0, local_rank=0, node_rank=0",
    "\x1b[36m(RayTrainWorker pid=26491)\x1b[0m Setting up process group for: env:// [rank=0, world_size=2]",
    "\x1b[36m(RayTrainWorker pid=26491)\x1b[0m Reporting training result 1: TrainingReport(checkpoint=Checkpoint("
    "filesystem=local, path=/tmp/runs/local-x/checkpoint_000020), metrics={'step': 20, 'loss': 1.54}",
    "\x1b[36m(RayTrainWorker pid=26491)\x1b[0m Checkpoint successfully created at: Checkpoint(filesystem=local, "
    "path=/tmp/runs/local-x/checkpoint_000040)\x1b[32m [repeated 2x across cluster]\x1b[0m",
    "\x1b[36m(RayTrainWorker pid=26491)\x1b[0m Warning: Detected no triton, on systems without Triton certain kernels",
    "(RayTrainWorker pid=26491) TRAIN_TRANSPORT {\"step\": 2, \"world_size\": 2, \"device\": \"cpu\", \"nccl_logs\": {}}",
]


def test_quiet_shows_the_projects_lines_and_hides_rays():
    shown: list[str] = []
    progress = local_output.Progress(verbose=False, out=shown.append)
    for line in [*OURS, *RAYS, 'TRAIN_SUMMARY {"steps": 40}']:
        progress(line)
    assert shown == list(OURS.values())
    assert progress.saw_error and progress.failure_tail("a\nb") == [], "the job said its own error: no tail again"


def test_verbose_shows_every_line_but_the_summary():
    shown: list[str] = []
    progress = local_output.Progress(verbose=True, out=shown.append)
    for line in [*OURS, *RAYS, 'TRAIN_SUMMARY {"steps": 40}']:
        progress(line)
    assert shown == [*OURS, *RAYS]


def test_a_crash_without_an_error_line_shows_the_end_of_the_log_once():
    progress = local_output.Progress(verbose=False, out=lambda line: None)
    tail = "\n".join(f"line {n}" for n in range(40)) + "\n\x1b[31mRuntimeError: boom\x1b[0m"
    assert progress.failure_tail(tail)[-1] == "RuntimeError: boom" and len(progress.failure_tail(tail)) == 15
    reason = ("ended FAILED: Job entrypoint command failed with exit code 1, last available logs (truncated to 20,000 "
              "chars):\nTraceback ...\nerror: boom")
    assert local_output.first_line(reason) == "ended FAILED: Job entrypoint command failed with exit code 1"


def test_every_progress_line_the_trainer_prints_is_shown():
    """A new `_progress(f"...")` in the trainer must start with one of OWN_PREFIXES, or quiet runs would hide it."""
    source = (REPO / "workload" / "trainer.py").read_text()
    starts = re.findall(r'_progress\(f?"([^"{]*)', source)
    assert len(starts) >= 6, starts
    for start in starts:
        assert start.startswith(local_output.OWN_PREFIXES) or start == "", f"_progress line {start!r} would be hidden"


def test_the_recap_says_what_a_person_wants_before_the_summary():
    summary = {"steps": 40, "start_step": 0, "world_size": 2, "device": "cpu", "initial_loss": 6.2774,
               "final_loss": 0.9551, "eval_loss": 0.9589, "tokens_per_s": 1972.1, "model": "/r/local-x/model_000040",
               "checkpoint": "/r/local-x/checkpoint_000040", "tensorboard": "/r/local-x/tensorboard"}
    assert local_output.recap(summary, 83.4) == [
        "done: steps 1..40 on 2 x cpu in 83 s; loss 6.2774 -> 0.9551, held-out 0.9589; 1,972 tokens/s",
        "model: /r/local-x/model_000040 (AutoModelForCausalLM.from_pretrained loads it)",
        "checkpoint: /r/local-x/checkpoint_000040 (the same --run_name resumes from it)",
        "curves: python -m tools.loss_curve /r/local-x --out run.svg"]
