"""Checkpoints: sharded saves and loads (torch.distributed.checkpoint), the reader that treats a checkpoint as
untrusted input, and the export to a Hugging Face model directory. May import workload's base, .model and .data.
"""
