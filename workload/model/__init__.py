"""The model: building it (shipped architectures or pretrained weights), its sharded weights and files, memory and
its plan, the parallel layout, fp8. May import workload's base and .fabric; architectures/ and memory*.py only the
standard library, so the Pulumi program reads them at preview without torch.
"""
