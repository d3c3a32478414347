"""The network between the ranks: which transport NCCL really used (EFA or the TCP fallback), each rank's NCCL log
lines, and the fabric check's bandwidth sweeps. Imports only workload's base; transport.py and bus_bandwidth.py only
the standard library (the layout's network cost, read at preview, counts with bus_bandwidth.py's factors).
"""
