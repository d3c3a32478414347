"""What EC2's DescribeInstanceTypes reports for the instance types the stacks and tests use.

The single table of instance facts for the tests: the Pulumi mocks answer `aws.ec2.get_instance_type` from
it, and the golden RayCluster manifests are rendered from it, and bench/model/step_model.py predicts step times from it.
Figures are AWS's published values (network bandwidth: each type's "Network bandwidth (Gbps)" in the EC2
instance type specifications, which DescribeInstanceTypes reports per network card; instance store: the disks and
their size in GB in the same specifications' "Instance store specifications", https://docs.aws.amazon.com/ec2/latest/
instancetypes/ac.html, which DescribeInstanceTypes reports as InstanceStorageInfo's disks and totalSizeInGB; p4d's
8 x 1,000 GB also in the EC2 user guide's instance store volume table, awsdocs/amazon-ec2-user-guide
doc_source/InstanceStorage.md).
"""
from infra.config import InstanceFacts

INSTANCE_FACTS = {
    facts.instance_type: facts
    for facts in (
        # 4 x NVIDIA L4; one EFA interface on its single network card.
        InstanceFacts("g6.12xlarge", gpus=4, gpu_memory_mib=22888, efa_supported=True,
                      maximum_efa_interfaces=1, network_cards=1, vcpus=48, memory_mib=196608,
                      gpu_name="L4", network_gbps=40.0, instance_store_gb=3760, instance_store_disks=4),  # 4 x 940 GB
        # 4 x NVIDIA L40S.
        InstanceFacts("g6e.12xlarge", gpus=4, gpu_memory_mib=46068, efa_supported=True,
                      maximum_efa_interfaces=1, network_cards=1, vcpus=48, memory_mib=393216,
                      gpu_name="L40S", network_gbps=100.0, instance_store_gb=3800, instance_store_disks=2),  # 2 x 1900
        # 8 x A100 40 GB; four network cards, one EFA interface each.
        InstanceFacts("p4d.24xlarge", gpus=8, gpu_memory_mib=40960, efa_supported=True,
                      maximum_efa_interfaces=4, network_cards=4, vcpus=96, memory_mib=1179648,
                      gpu_name="A100", network_gbps=400.0, instance_store_gb=8000, instance_store_disks=8),  # 8 x 1000
        # 8 x H100; 32 network cards, one EFA interface each.
        InstanceFacts("p5.48xlarge", gpus=8, gpu_memory_mib=81920, efa_supported=True,
                      maximum_efa_interfaces=32, network_cards=32, vcpus=192, memory_mib=2097152,
                      gpu_name="H100", network_gbps=3200.0, instance_store_gb=30720,
                      instance_store_disks=8),  # 8 x 3840 GB
        # A GPU type without EFA, and a CPU type: both must be refused as GPU node types.
        InstanceFacts("g6.xlarge", gpus=1, gpu_memory_mib=22888, efa_supported=False,
                      maximum_efa_interfaces=0, network_cards=1, vcpus=4, memory_mib=16384,
                      gpu_name="L4", network_gbps=10.0),
        InstanceFacts("m7i.xlarge", gpus=0, gpu_memory_mib=0, efa_supported=False,
                      maximum_efa_interfaces=0, network_cards=1, vcpus=4, memory_mib=16384),
        # System node types the stack must refuse: too small for the Ray head, and Graviton (arm64).
        InstanceFacts("m7i.large", gpus=0, gpu_memory_mib=0, efa_supported=False,
                      maximum_efa_interfaces=0, network_cards=1, vcpus=2, memory_mib=8192),
        InstanceFacts("m7g.xlarge", gpus=0, gpu_memory_mib=0, efa_supported=False,
                      maximum_efa_interfaces=0, network_cards=1, vcpus=4, memory_mib=16384, architectures=("arm64",)),
    )
}
