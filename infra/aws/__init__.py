"""AWS resources: the VPC, the EKS control plane and system node group, the EFA GPU node group and its placement
group and capacity reservation, node repair, and the IAM roles and trust. May import infra.config and workload/.
"""
