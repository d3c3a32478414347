"""The model: building it (shipped architectures or pretrained weights), its sharding, optimizer, loss, step and
FLOPs, its sharded weights and files, memory and its plan, the parallel layout, fp8. May import workload's base and
.fabric; architectures/, memory*.py, layout.py, flops.py and gpu_peaks.py only the standard library (and .fabric's
bus_bandwidth.py), so the Pulumi program reads them at preview.
"""
