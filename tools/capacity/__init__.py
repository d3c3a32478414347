"""The GPU capacity finder: where can the GPU nodes be had? `python -m tools.capacity --help`. May import infra/ and
workload/ (the reservation's and quotas' facts, the exit codes), as every tool may.

cli.py (the command), survey.py (offerings, quotas, Spot scores, subnets per AZ, ranked), quotas.py (On-Demand vCPU
quotas), probe.py (real reservations, created and cancelled at once), stack_file.py (reads and writes the stack
file), aws.py (the boto3 clients).
"""
