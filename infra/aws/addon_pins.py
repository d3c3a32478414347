"""The EKS add-on versions this stack pins (issue 31, item 7), each with why and where the version string was seen.

Why pin. Without `addon_version` EKS installs its default version for the cluster's Kubernetes version, which is
whatever EKS says on the day of the `up`, and the configuration values we send must fit that version's configuration
schema (EKS validates them against `describe-addon-configuration` and refuses the add-on otherwise). The node
monitoring agent's `dcgmAgent` key is in that schema only from the agent's v1.6 line on (below), so an older default
refuses our configuration; the CloudWatch add-on's default changed what it collects between releases (v6.0.0 turned
OTel Container Insights on, v6.2.0 off again). A pin makes both a reviewed diff.

Kubernetes versions. An add-on version is accepted only on the cluster versions `describe-addon-versions` lists in
its `compatibilities`; on any other EKS refuses the add-on at create (InvalidParameterException). The stack's
`kubernetesVersion` defaults to 1.34 (Pulumi.yaml) and the preview allows 1.32-1.35
(infra/preview/feasibility.py, EKS_VERSIONS). What the sources below show for each pin is said beside it; before
bumping either pin, or the stack's Kubernetes version, run
`aws eks describe-addon-versions --addon-name NAME --kubernetes-version X.Y` and check the pin is listed.

Where the versions were not read: this program is developed where no AWS API can be reached, so no
`describe-addon-versions` was run here. Each string below is one that a cited public source shows EKS serving.
"""
from __future__ import annotations

NODE_MONITORING_AGENT_ADDON = "eks-node-monitoring-agent"
# v1.6.6-eksbuild.1 (agent release v1.6.6, 2026-06-10; github.com/aws/eks-node-monitoring-agent CHANGELOG.md).
# - The string is the add-on's: a public Terraform config pins `eks_node_monitoring_agent = "v1.6.6-eksbuild.1"` with
#   the `aws eks describe-addon-versions --kubernetes-version 1.36 ... defaultVersion==true` query it came from (EKS's
#   default on 1.36), and a public add-on status table lists eks-node-monitoring-agent `v1.6.6-eksbuild.1` working on a
#   Kubernetes 1.35 cluster; zalando-incubator/kubernetes-on-aws PR #11470 ("Update EKS Node Monitoring Agent addon
#   version to v1.6.6", 2026-06-22) runs it as an EKS add-on. The agent's chart at tag v1.6.6
#   (charts/eks-node-monitoring-agent/values.yaml, nodeAgent.image.tag) carries the same `v1.6.6-eksbuild.1`.
# - Its configuration schema (charts/configuration.schema.json at tag v1.6.6, copied to tests/reference/charts) has
#   `dcgmAgent` with `tolerations`, which infra/aws/node_health.py sets. In that repository's history the key enters
#   the schema on 2026-02-19 (commit e939bff); it is absent at every earlier release commit (v1.0.2 to v1.5.1) and
#   present at every tag from v1.6.0 on.
# - Why not v1.7.0: its chart tag is v1.7.0-eksbuild.1, but no source found shows EKS serving that add-on version;
#   the image tag alone is not the add-on's version list. The keys we set are the same in both schemas.
# - Kubernetes: shown on 1.35 and 1.36 (above); no source found lists 1.32-1.34 for this build, so a stack on those
#   versions should run the describe-addon-versions check above before its first `up`.
NODE_MONITORING_AGENT_VERSION = "v1.6.6-eksbuild.1"
NODE_MONITORING_AGENT_SCHEMA_TAG = "v1.6.6"
"""The agent's git tag whose charts/configuration.schema.json the configuration is checked against (the tests)."""

CLOUDWATCH_ADDON = "amazon-cloudwatch-observability"
# v6.4.0-eksbuild.1 (chart release amazon-cloudwatch-observability v6.4.0, 2026-07-21;
# github.com/aws-observability/helm-charts RELEASE_NOTES).
# - The string is the add-on's: public configs pin `amazon-cloudwatch-observability = "v6.4.0-eksbuild.1"`, one
#   mapping it for Kubernetes 1.31, 1.32, 1.33, 1.34 and 1.35; public write-ups report it validated on EKS 1.34 and
#   as EKS's default build on 1.36 (2026-08-08), and a `describe-addon-versions` table lists it beside v6.5.0 and
#   v6.6.0 (-eksbuild.1).
# - What it runs: classic Container Insights with enhanced observability, as infra/kubernetes/monitoring.py
#   describes (the chart's values at v6.4.0: containerInsights.enabled true, otelContainerInsights.enabled false;
#   RELEASE_NOTES v6.2.0 "Disable Otel Container Insights by default", after v6.0.0 had turned it on), with the DCGM
#   exporter (4.6.0-4.8.3) for GPU metrics. We send no configuration values, so the chart's defaults hold.
# - Kubernetes: 1.31-1.36 by the sources above, which covers every version the preview allows.
CLOUDWATCH_VERSION = "v6.4.0-eksbuild.1"

ADDON_VERSIONS = {
    NODE_MONITORING_AGENT_ADDON: NODE_MONITORING_AGENT_VERSION,
    CLOUDWATCH_ADDON: CLOUDWATCH_VERSION,
}
"""Every pinned add-on by its EKS name: the one place the pins live (tests check both Addon resources use it)."""
