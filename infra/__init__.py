"""Pulumi components of the Ray Train on EKS stack. Nothing here creates a resource at import time."""
