"""Ray Train + FSDP fine-tuning workload. Runs unchanged on CPU processes (gloo) and on GPUs (NCCL)."""
