"""Benchmarks of record: each measures one claim the docs make, on a GPU unless bench/README.md says CPU, and its
output (JSON lines on stdout, a provenance line with its command, machine and versions on stderr) is kept under
bench/results/ with the command in bench/results/RESULTS.md.

May import bench.common, bench.model, workload/ and one another (a shared loop or child process); never bench.explore.
Only scaling and emulate import ray (they run the job under Ray Train); the rest reuse workload modules without it.
"""
