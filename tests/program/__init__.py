"""The Pulumi program and the cloud it talks to, without a cloud: the whole program under `pulumi.runtime.set_mocks`
(tests/support/pulumi_mocks.py), its components and dynamic providers, its manifests against the Kubernetes and KubeRay
schemas, and the AWS calls of the program and the operator's tools against moto and botocore Stubbers."""
