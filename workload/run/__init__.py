"""Running the job: the local run (`python -m workload.local`, a one-node Ray cluster), its checks before Ray starts
and its output, and the submission to a Ray job server through the Jobs API. May import everything below it.
"""
