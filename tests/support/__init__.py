"""Every fake and helper the tests share, one module a service or a tool, no test in it: `fake_*` answers as a service
does (fake_aws, fake_eks, fake_ec2_capacity, fake_s3, fake_hub, fake_ray_jobs, fake_json_api), `local_*` starts a
real one on this machine (local_ray, local_mlflow), `gloo_*` runs in the ranks of a gloo process group, and the rest
are named by what they do (pulumi_mocks, docs_shell, instance_facts, iam_policy, listening_sockets, wandb_files)."""
