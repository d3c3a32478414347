"""One-off explorations, each used once to choose something (the step's levers, where its time goes); their logs are
under bench/results/ beside RESULTS.md's account, but they are not rerun as benchmarks of record.

May import bench.common, bench.model and workload/ (levers: nothing of the project's); nothing imports them.
"""
