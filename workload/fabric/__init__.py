"""The network between the ranks: which transport NCCL really used (EFA or the TCP fallback), each rank's NCCL log
lines, and the fabric check's bandwidth sweeps. Imports only workload's base; transport.py only the standard library.
"""
