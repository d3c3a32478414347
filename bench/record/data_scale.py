"""The data stage at real sizes, on CPU: tokens per second per core, the stage's memory, a rank's memory and its time
to the first batch on a cache hit (workload/data/stage.py, cache.py, shards.py; issue 42).

    python -m bench.record.data_scale                          # 100 MB of text and of chat, the stage on 1 and 2 CPUs
    python -m bench.record.data_scale --sizes 100 1000         # and 1 GB
    python -m bench.record.data_scale --sizes 100 --shard_gb 10   # and a rank reading a 10 GB token shard written directly

Corpora are generated here, real-text-like: words of a 50k-word vocabulary (pseudo-words of 2-12 letters) drawn from
a Zipf distribution (s = 1.1, as word frequencies in English text; the shortest words the most frequent), documents
of 50-2000 words (text) or conversations of 1-4 user/assistant turn pairs of 10-300 words each (chat, OpenAI
messages), as .jsonl. The tokenizer is a 32k byte-level BPE trained on the text corpus's first 20 MB (the issue's
measurements used the same kind); chat is rendered with the shipped qwen2.5 template. Each measurement runs in a
subprocess of its own, so its peak RSS is its own: the stage with `ray.init(num_cpus=N)` (the driver's peak RSS
(VmHWM), the Ray workers' from psutil polled every 0.2 s, and their CPU seconds: this machine's 2 cores are shared,
so tokens per worker CPU second is the figure that does not depend on the load beside it), and a training rank (rank
0 of 4) that opens the cache and reads 500 batches of 8 x 2048 tokens. Results: one JSON line per measurement in
bench/results/data_scale-cpu-<date>.jsonl, the console in .log. `--local_run` adds the issue's done-when:
`python -m workload.local` on the text corpus twice on one storage path (the second from the cache) and once on
random tokens, with every Ray Train worker's peak RSS and the seconds to the first step.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import shutil
import subprocess
import sys
import threading
import time

import numpy as np

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
WORDS = 50_000
ZIPF = 1.1
SEQ_LEN = 2048
BATCH = 8
RANK_BATCHES = 500


def vocabulary(seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    letters = np.array(list("etaoinshrdlcumwfgypbvkjxqz"))
    weights = np.array([12.7, 9.1, 8.2, 7.5, 7.0, 6.7, 6.3, 6.1, 6.0, 4.3, 4.0, 2.8, 2.8, 2.4, 2.4, 2.2, 2.0, 2.0,
                        1.9, 1.5, 1.0, 0.8, 0.2, 0.2, 0.1, 0.1])
    lengths = rng.integers(2, 13, WORDS)
    drawn = rng.choice(letters, size=lengths.sum(), p=weights / weights.sum())
    cuts = np.cumsum(lengths)[:-1]
    found = np.array(["".join(word) for word in np.split(drawn, cuts)])
    return found[np.argsort(lengths, kind="stable")]  # as in any language, the most frequent words are the shortest


def words(rng, vocab: np.ndarray, count: int) -> str:
    ranks = rng.zipf(ZIPF, count)
    return " ".join(vocab[np.minimum(ranks, len(vocab)) - 1])


def make_corpus(kind: str, megabytes: int, path: str, seed: int = 0) -> None:
    if os.path.exists(path) and os.path.getsize(path) >= megabytes * 10**6:
        return
    rng, vocab = np.random.default_rng(seed), vocabulary(seed)
    written = 0
    with open(path + ".tmp", "w") as out:
        while written < megabytes * 10**6:
            if kind == "text":
                record = {"text": words(rng, vocab, int(rng.integers(50, 2000)))}
            else:
                turns = []
                for _ in range(int(rng.integers(1, 5))):
                    turns += [{"role": "user", "content": words(rng, vocab, int(rng.integers(10, 300)))},
                              {"role": "assistant", "content": words(rng, vocab, int(rng.integers(10, 300)))}]
                record = {"messages": turns}
            line = json.dumps(record) + "\n"
            out.write(line)
            written += len(line)
    os.rename(path + ".tmp", path)


def make_tokenizer(corpus: str, directory: str) -> None:
    """A 32k byte-level BPE trained on the corpus's first 20 MB, saved as a transformers tokenizer."""
    if os.path.exists(os.path.join(directory, "tokenizer.json")):
        return
    from tokenizers import ByteLevelBPETokenizer
    from transformers import PreTrainedTokenizerFast

    def lines():
        with open(corpus) as file:
            read = 0
            for line in file:
                read += len(line)
                yield json.loads(line)["text"]
                if read > 20 * 10**6:
                    return

    bpe = ByteLevelBPETokenizer()
    bpe.train_from_iterator(lines(), vocab_size=32_000,
                            special_tokens=["<|endoftext|>", "<|im_start|>", "<|im_end|>"])
    fast = PreTrainedTokenizerFast(tokenizer_object=bpe, eos_token="<|endoftext|>", pad_token="<|endoftext|>",
                                   additional_special_tokens=["<|im_start|>", "<|im_end|>"])
    fast.save_pretrained(directory)


def config(kind: str, dataset: str, tokenizer: str):
    from workload.config import TrainConfig

    extra = {"data_format": "chat", "chat_template": "qwen2.5"} if kind == "chat" else {}
    return TrainConfig(model_config="tiny", dataset=dataset, tokenizer=tokenizer, seq_len=SEQ_LEN, batch_size=BATCH,
                       **extra)


class WorkerMemory:
    """The largest RSS of any Ray task worker (ray::MapBatches...), and the CPU seconds they spent, polled: on a
    machine shared with other work the wall time says little, tokens per CPU second of the workers does."""

    def __init__(self) -> None:
        import psutil

        self.psutil, self.peak, self.cpu, self.done = psutil, 0, {}, False
        self.thread = threading.Thread(target=self._poll, daemon=True)
        self.thread.start()

    def _poll(self) -> None:
        while not self.done:
            for process in self.psutil.process_iter(["pid", "name", "cmdline", "memory_info", "cpu_times"]):
                try:
                    name = " ".join(process.info["cmdline"] or [process.info["name"] or ""])
                    if name.startswith("ray::MapBatches") and process.info["memory_info"]:
                        self.peak = max(self.peak, process.info["memory_info"].rss)
                        times = process.info["cpu_times"]
                        self.cpu[process.info["pid"]] = times.user + times.system
                except (self.psutil.Error, TypeError, AttributeError):
                    continue
            time.sleep(0.2)

    def stop(self) -> tuple[int, float]:
        self.done = True
        self.thread.join()
        return self.peak, sum(self.cpu.values())


def peak_rss_mib() -> int:
    """This process's peak RSS: VmHWM, which starts afresh at exec (getrusage's ru_maxrss can carry the parent's
    peak across fork and exec)."""
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) // 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024


def child_stage(kind: str, dataset: str, tokenizer: str, cpus: int) -> dict:
    import ray

    from workload.data import stage

    ray.init(address="local", num_cpus=cpus, include_dashboard=False, log_to_driver=False)
    memory = WorkerMemory()
    load = os.getloadavg()[0]
    started = time.monotonic()
    location = stage.prepare(config(kind, dataset, tokenizer), say=lambda line: print(line, flush=True))
    seconds = time.monotonic() - started
    worker_peak, worker_cpu_s = memory.stop()
    from workload.data import cache

    complete = cache.manifest(location)
    read = complete["read"]
    ray.shutdown()
    return {"measure": "stage", "kind": kind, "dataset_bytes": os.path.getsize(dataset), "cpus": cpus,
            "records": read["records"], "tokens": read["tokens"], "tokenize_s": read["seconds"],
            "stage_s": round(seconds, 2), "tokens_per_s": round(read["tokens"] / read["seconds"]),
            "tokens_per_s_per_core": round(read["tokens"] / read["seconds"] / cpus),
            "blocks": complete["blocks"], "shard_bytes": sum(os.path.getsize(os.path.join(location, name))
                                                            for name in os.listdir(location)),
            "driver_peak_rss_mib": peak_rss_mib(),
            "worker_peak_rss_mib": worker_peak // 2**20, "worker_cpu_s": round(worker_cpu_s, 1),
            "tokens_per_worker_cpu_s": round(read["tokens"] / max(worker_cpu_s, 1e-9)),
            "load_average_before": round(load, 2), "load_average_after": round(os.getloadavg()[0], 2),
            "location": location}


def child_rank(kind: str, dataset: str, tokenizer: str, location: str | None) -> dict:
    """Rank 0 of 4 on a cache hit: the key, the shards opened, the first batch, then RANK_BATCHES batches."""
    started = time.monotonic()
    import psutil
    import torch  # noqa: F401 - the rank has torch loaded whatever it reads

    from workload.data import batches, stage

    imported_rss = psutil.Process().memory_info().rss
    after_imports = time.monotonic()
    cfg = config(kind, dataset, tokenizer) if dataset else None
    if location is None:
        location = stage.prepare(cfg, say=lambda line: print(line, flush=True))
    if cfg is None:
        from workload.config import TrainConfig

        cfg = TrainConfig(model_config="tiny", seq_len=SEQ_LEN, batch_size=BATCH)
        data = batches.cached_data(cfg, location, 0, 4)
    else:
        data = batches.make_data(cfg, 0, 0, 4, location)
    first = data.train(0)
    first_batch_s = time.monotonic() - after_imports
    for step in range(1, RANK_BATCHES):
        data.train(step)
    return {"measure": "rank", "kind": kind, "dataset_bytes": os.path.getsize(dataset) if dataset else None,
            "shard_bytes": int(data.blocks.nbytes), "first_batch_s_after_imports": round(first_batch_s, 3),
            "process_to_first_batch_s": round(after_imports - started + first_batch_s, 3),
            "batch_shape": list(_shape(first)), "batches_read": RANK_BATCHES,
            "rss_after_imports_mib": imported_rss // 2**20,
            "peak_rss_mib": peak_rss_mib(),
            "memmap": type(data.blocks).__name__}


def _shape(batch) -> tuple:
    return tuple(batch.input_ids.shape) if hasattr(batch, "input_ids") else tuple(batch.shape)


def write_shard(directory: str, gigabytes: float) -> str:
    """A token shard of `gigabytes` written directly (token ids counting up), with its COMPLETE.json."""
    from workload.data import cache, shards

    rows = int(gigabytes * 2**30 // (SEQ_LEN * 4))
    if cache.manifest(directory) is None:
        os.makedirs(directory, exist_ok=True)
        out = np.lib.format.open_memmap(os.path.join(directory, shards.TRAIN), mode="w+", dtype=np.int32,
                                        shape=(rows, SEQ_LEN))
        chunk = np.arange(shards.ROWS_PER_WRITE * SEQ_LEN, dtype=np.int32).reshape(-1, SEQ_LEN) % 32_000
        for start in range(0, rows, shards.ROWS_PER_WRITE):
            out[start:start + shards.ROWS_PER_WRITE] = chunk[:min(rows - start, shards.ROWS_PER_WRITE)]
        out.flush()
        del out
        with open(os.path.join(directory, cache.COMPLETE), "w") as file:
            json.dump({"tokens": rows * SEQ_LEN, "blocks": {shards.TRAIN: rows}}, file)
    return directory


class ProcessMemory:
    """The peak RSS of each process whose command line holds one of `names`, polled every 0.2 s."""

    def __init__(self, names: tuple[str, ...]) -> None:
        import psutil

        self.psutil, self.names, self.peaks, self.done = psutil, names, {}, False
        self.thread = threading.Thread(target=self._poll, daemon=True)
        self.thread.start()

    def _poll(self) -> None:
        while not self.done:
            for process in self.psutil.process_iter(["pid", "cmdline", "memory_info"]):
                try:
                    line = " ".join(process.info["cmdline"] or [])
                    name = next((name for name in self.names if name in line), None)
                    if name and process.info["memory_info"]:
                        key = f"{name} pid {process.info['pid']}"
                        self.peaks[key] = max(self.peaks.get(key, 0), process.info["memory_info"].rss // 2**20)
                except (self.psutil.Error, TypeError):
                    continue
            time.sleep(0.2)

    def stop(self) -> dict:
        self.done = True
        self.thread.join()
        return self.peaks


def local_run(dataset: str, storage: str, run_name: str, log) -> dict:
    """`python -m workload.local --dataset DATASET --steps 2` (no evaluation set: it would evaluate the whole held-out
    share at the last step): seconds to its first step, and every Ray Train worker's peak RSS."""
    command = [sys.executable, "-m", "workload.local", "--dataset", dataset, "--steps", "2", "--warmup_steps", "0",
               "--eval_fraction", "0", "--eval_every", "0", "--checkpoint_every", "0", "--export", "none",
               "--storage_path", storage, "--run_name", run_name, "--verbose"]  # verbose: the job log's data lines too
    memory = ProcessMemory(("RayTrainWorker", "workload.train"))
    started = time.monotonic()
    first_step, lines = None, []
    with subprocess.Popen(command, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) as process:
        for line in process.stdout:
            lines.append(line.rstrip())
            if line.startswith("data: ") or ("step " in line and " loss " in line):
                log(f"  {line.rstrip()}")
            if first_step is None and "step 1/" in line and " loss " in line:  # after Ray's "(RayTrainWorker pid=N)"
                first_step = time.monotonic() - started
    peaks = memory.stop()
    if process.returncode:
        log("\n".join(lines[-30:]))
        raise SystemExit(f"{' '.join(command)} failed")
    workers = {name: peak for name, peak in peaks.items() if name.startswith("RayTrainWorker")}
    return {"measure": "local_run", "dataset": dataset, "dataset_bytes": os.path.getsize(dataset) if dataset else 0,
            "run_name": run_name, "seconds_to_first_step": round(first_step, 1),
            "seconds_total": round(time.monotonic() - started, 1), "train_worker_peak_rss_mib": workers,
            "driver_peak_rss_mib": max([peak for name, peak in peaks.items() if name.startswith("workload.train")]
                                       or [0]),
            "data_lines": [line for line in lines if line.startswith("data: ")]}


def run_child(args: list[str], env: dict, log) -> dict:
    found = subprocess.run([sys.executable, "-m", "bench.record.data_scale", *args], cwd=REPO, env=env, text=True,
                           capture_output=True)
    for line in found.stdout.splitlines()[:-1]:
        log(f"  {line}")
    if found.returncode:
        log(found.stderr[-3000:])
        raise SystemExit(f"child {args} failed")
    return json.loads(found.stdout.splitlines()[-1])


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[100], help="corpus sizes in MB")
    parser.add_argument("--kinds", nargs="*", default=["text", "chat"])
    parser.add_argument("--cpus", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--shard_gb", type=float, default=0, help="also a rank reading a token shard this large")
    parser.add_argument("--local_run", action="store_true", help="also the issue's done-when: python -m "
                        "workload.local on the smallest text corpus twice (the second from the cache), and on random "
                        "tokens, with every Ray Train worker's peak RSS")
    parser.add_argument("--work", default=os.path.join(REPO, "runs", "data_scale"))
    parser.add_argument("--child", choices=["stage", "rank"])
    parser.add_argument("--kind", default="text")
    parser.add_argument("--dataset", default="")
    parser.add_argument("--tokenizer", default="")
    parser.add_argument("--location")
    parser.add_argument("--cpus_one", type=int, default=1)
    return parser


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    if args.child == "stage":
        print(json.dumps(child_stage(args.kind, args.dataset, args.tokenizer, args.cpus_one)))
        return
    if args.child == "rank":
        print(json.dumps(child_rank(args.kind, args.dataset, args.tokenizer, args.location)))
        return

    os.makedirs(args.work, exist_ok=True)
    results = os.path.join(REPO, "bench", "results")
    stem = os.path.join(results, f"data_scale-cpu-{time.strftime('%Y-%m-%d')}")
    with open(stem + ".log", "a") as log_file, open(stem + ".jsonl", "a") as jsonl:
        def log(line: str) -> None:
            print(line, flush=True)
            log_file.write(line + "\n")
            log_file.flush()

        def record(found: dict) -> None:
            found = {**found, "command": " ".join(sys.argv), "machine": platform.node(), "cores": os.cpu_count(),
                     "python": platform.python_version(), "date": time.strftime("%Y-%m-%dT%H:%M:%S")}
            log(json.dumps(found))
            jsonl.write(json.dumps(found) + "\n")
            jsonl.flush()

        log(f"# {' '.join(sys.argv)} on {platform.node()} ({os.cpu_count()} cores), {time.strftime('%c')}")
        tokenizer = os.path.join(args.work, "bpe32k")
        make_corpus("text", min(args.sizes), os.path.join(args.work, f"text-{min(args.sizes)}MB.jsonl"))
        make_tokenizer(os.path.join(args.work, f"text-{min(args.sizes)}MB.jsonl"), tokenizer)
        for size in args.sizes:
            for kind in args.kinds:
                dataset = os.path.join(args.work, f"{kind}-{size}MB.jsonl")
                started = time.monotonic()
                make_corpus(kind, size, dataset)
                log(f"{dataset}: {os.path.getsize(dataset) / 1e6:.0f} MB ({time.monotonic() - started:.0f} s to make)")
                for cpus in args.cpus:
                    env = {**os.environ, "RAYTRAIN_DATA_CACHE": os.path.join(args.work, f"cache-{cpus}cpu")}
                    shutil.rmtree(env["RAYTRAIN_DATA_CACHE"], ignore_errors=True)  # the stage runs, not a cache hit
                    found = run_child(["--child", "stage", "--kind", kind, "--dataset", dataset, "--tokenizer",
                                       tokenizer, "--cpus_one", str(cpus)], env, log)
                    record(found)
                record(run_child(["--child", "rank", "--kind", kind, "--dataset", dataset, "--tokenizer", tokenizer],
                                 env, log))
        if args.local_run:
            dataset = os.path.join(args.work, f"text-{min(args.sizes)}MB.jsonl")
            storage = os.path.join(args.work, "local-storage")
            shutil.rmtree(storage, ignore_errors=True)
            for name, source in (("first", dataset), ("second", dataset), ("random", "")):
                record(local_run(source, storage, f"data-scale-{name}", log))
        if args.shard_gb:
            directory = write_shard(os.path.join(args.work, f"shard-{args.shard_gb:g}GB"), args.shard_gb)
            record({**run_child(["--child", "rank", "--location", directory], dict(os.environ), log),
                    "synthetic_shard_gb": args.shard_gb})


if __name__ == "__main__":
    main()
