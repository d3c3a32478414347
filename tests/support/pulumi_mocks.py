"""Run the whole Pulumi program (`__main__.py`) under `pulumi.runtime.set_mocks` and look at what it registered.

    run = run_program("dev", {"gpuNodeCount": 3})        # Pulumi.dev.yaml plus overrides
    ng = run.one("aws:eks/nodeGroup:NodeGroup", "ray-train-gpu-ng")
    assert ng.inputs["scalingConfig"]["desiredSize"] == 3

    failed = run_program_expecting_error("dev", {"gpuNodeCount": 0})
    assert isinstance(failed.error, ValueError) and failed.resources == []

Always with preview=False: under preview, unknown outputs make assertions inside `apply` silently never run.

What the fake AWS answers:
- `aws.ec2.get_instance_type` from tests/support/instance_facts.py's INSTANCE_FACTS; an unknown type fails as EC2 does.
- `aws.get_availability_zones` from REGIONS below; an unknown region fails.
- `aws.servicequotas.get_service_quota` from QUOTAS; in UNREADABLE_QUOTA_REGIONS it fails, as without permission.
- caller identity, partition, region.
- the deployer's public address (infra.aws.network.deployer_public_ip, an HTTPS request at preview): DEPLOYER_IP.
- an existing capacity reservation (infra.aws.capacity_reservation.describe_existing, boto3 at preview) from
  RESERVATIONS, in the region of its AZ only; that function itself is tested against botocore Stubbers.
- the AZs that offer an instance type (infra.aws.offerings.read_zones_offering, boto3 at preview): every AZ of REGIONS
  but UNOFFERED's; a test that sets this module's `read_zones_offering` to the real one asks moto instead.
- the stack's own reservations by their URN tag (infra.aws.reservation_end.describe_tagged) from TAGGED_RESERVATIONS.
- `eks:index:Cluster` (a remote component) returns kubeconfig, security group, OIDC and an `eksCluster` that
  is a real resource reference, as pulumi-eks's does; its `kubeconfig` output carries `--role` but never
  `--profile` (pulumi-eks returns kubeconfigWithoutProfile), and its getKubeconfig method answers with both.
Resource references found in any resource's inputs are turned into their URNs before the mock monitor
deserializes them: deserializing a reference constructs a Resource inside the monitor, which makes the stock
mock monitor flaky.
"""
from __future__ import annotations

import functools
import json
import runpy
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from unittest import mock

import pulumi
import yaml
from google.protobuf import struct_pb2
from pulumi.runtime import config as runtime_config
from pulumi.runtime import mocks as pulumi_mocks
from pulumi.runtime import rpc, settings
from pulumi.runtime.proto import provider_pb2
from pulumi.runtime.stack import run_pulumi_func
from pulumi.runtime.sync_await import _sync_await

from infra.aws import capacity_reservation, network, offerings, reservation_end
from tests.support.fake_aws import DEPLOYER_IP, AwsMocks, describe_existing, describe_tagged, read_zones_offering

REPO = Path(__file__).resolve().parents[2]
PROGRAM = REPO / "__main__.py"
PROJECT_FILE = yaml.safe_load((REPO / "Pulumi.yaml").read_text())
PROJECT = PROJECT_FILE["name"]
SCHEMA: dict[str, dict[str, Any]] = PROJECT_FILE["config"]
"""Pulumi.yaml's config keys: type, default and description of each."""
STACKS = sorted(path.name.split(".")[1] for path in REPO.glob("Pulumi.*.yaml"))



@dataclass
class Registration:
    """One registered resource: its type token, logical name, URN, parent URN and the inputs it was given."""

    type: str
    name: str
    urn: str
    parent: str
    custom: bool
    inputs: dict[str, Any]
    outputs: dict[str, Any]
    dependencies: list[str]
    provider: str
    read: bool = False
    delete_before_replace: bool = False
    alias_parents: list[str] = field(default_factory=list)
    """The parent URNs of the resource's aliases: where it used to live."""
    replacement_trigger: Any = None
    """The replacement_trigger option, deserialized (a secret stays wrapped in the secret signature)."""
    transforms: int = 0
    """How many resource transforms the registration carries (the engine runs them on the resource's children; the
    mock monitor does not)."""
    ignore_changes: list[str] = field(default_factory=list)
    """The ignore_changes option: property paths `pulumi up` leaves as the cloud has them."""

    @property
    def resource_id(self) -> str:
        return self.outputs.get("id", "")


def is_secret_value(value: Any) -> bool:
    """Whether a recorded input was passed as a Pulumi secret (it arrives wrapped in the secret signature)."""
    return isinstance(value, dict) and value.get(rpc._special_sig_key) == rpc._special_secret_sig


def plain_strings(value: Any) -> list[str]:
    """Every string in a recorded value outside its secrets (keys included): what the state and preview show in
    plain text."""
    if is_secret_value(value):
        return []
    if isinstance(value, dict):
        return [text for key, item in value.items() for text in (str(key), *plain_strings(item))]
    if isinstance(value, (list, tuple)):
        return [text for item in value for text in plain_strings(item)]
    return [str(value)] if value is not None else []


def _urns_for_references(value: struct_pb2.Value) -> None:
    """Replace every resource reference inside `value` by its URN, in place."""
    kind = value.WhichOneof("kind")
    if kind == "struct_value":
        fields = value.struct_value.fields
        if rpc._special_sig_key in fields and fields[rpc._special_sig_key].string_value == rpc._special_resource_sig:
            value.string_value = fields["urn"].string_value
            return
        for item in fields.values():
            _urns_for_references(item)
    elif kind == "list_value":
        for item in value.list_value.values:
            _urns_for_references(item)


class RecordingMonitor(pulumi_mocks.MockMonitor):
    """The stock mock monitor, plus a record of every registration (with parent) and references as URNs."""

    def __init__(self, mocks: AwsMocks) -> None:
        super().__init__(mocks)
        self.registrations: list[Registration] = []

    def _record(self, request, urn: str, outputs: dict, *, read: bool) -> None:
        struct = request.properties if read else request.object
        self.registrations.append(Registration(
            type=request.type, name=request.name, urn=urn, parent=request.parent,
            custom=read or bool(request.custom), inputs=rpc.deserialize_properties(struct),
            outputs=outputs, dependencies=list(getattr(request, "dependencies", [])),
            provider=request.provider, read=read,
            delete_before_replace=bool(getattr(request, "deleteBeforeReplace", False)),
            alias_parents=[alias.spec.parentUrn for alias in getattr(request, "aliases", [])
                           if alias.HasField("spec") and alias.spec.parentUrn],
            transforms=len(getattr(request, "transforms", [])) if not read else 0,
            ignore_changes=list(getattr(request, "ignoreChanges", [])),
            replacement_trigger=(rpc.deserialize_properties(struct_pb2.Struct(
                fields={"trigger": request.replacement_trigger}), keep_unknowns=True)["trigger"]
                if not read and request.HasField("replacement_trigger") else None)))

    def RegisterResource(self, request):
        if request.type != "pulumi:pulumi:Stack":
            for item in request.object.fields.values():
                _urns_for_references(item)
        response = super().RegisterResource(request)
        if request.type != "pulumi:pulumi:Stack":
            registered = self.resources[response.urn]
            self._record(request, response.urn, {**registered.state, "id": registered.id}, read=False)
        return response

    def Call(self, request):
        for item in request.args.fields.values():
            _urns_for_references(item)
        result = self.mocks.method_call(request.tok, rpc.deserialize_properties(request.args))
        return provider_pb2.CallResponse(**{"return": _sync_await(rpc.serialize_properties(result, {}))})

    def ReadResource(self, request):
        for item in request.properties.fields.values():
            _urns_for_references(item)
        response = super().ReadResource(request)
        registered = self.resources[response.urn]
        self._record(request, response.urn, {**registered.state, "id": registered.id}, read=True)
        return response


class EchoMocks(pulumi.runtime.Mocks):
    """Echoes inputs back as state; the monitor below keeps every registration."""

    def __init__(self) -> None:
        self.registered: list[dict] = []

    def new_resource(self, args: pulumi.runtime.MockResourceArgs):
        return f"{args.name}-id", dict(args.inputs)

    def call(self, args: pulumi.runtime.MockCallArgs):
        return {}

    def named(self, name: str) -> dict:
        (registration,) = [r for r in self.registered if r["name"] == name]
        return registration


class EchoMonitor(pulumi_mocks.MockMonitor):
    """The mock monitor, also noting each resource's inputs, `dependencies` (what depends_on resolves to) and
    additional secret outputs."""

    def RegisterResource(self, request):
        response = super().RegisterResource(request)
        self.mocks.registered.append({
            "urn": response.urn,
            "type": request.type,
            "name": request.name,
            "dependencies": set(request.dependencies),
            "inputs": self.resources[response.urn].state if response.urn in self.resources else {},
            "secret_outputs": list(request.additionalSecretOutputs),
        })
        return response


def run_under_mocks(build, mocks: EchoMocks | None = None) -> tuple[EchoMocks, object]:
    """Run `build()` (components built by hand, not the whole program) under mocks that echo inputs as state;
    return the registrations once every one has finished. Pass `mocks` to read them after `build()` raised."""
    mocks = mocks if mocks is not None else EchoMocks()
    pulumi.runtime.set_mocks(mocks, project=PROJECT, stack="dev", preview=False, monitor=EchoMonitor(mocks))
    built = {}

    @pulumi.runtime.test
    def program():
        built["value"] = build()
        return built["value"]  # an Output returned here is awaited, so its applies have run on return

    program()
    return mocks, built["value"]


@dataclass
class ProgramRun:
    """The outcome of one program run: the registrations in order, the stack exports, and any error."""

    stack: str
    config: dict[str, str]
    resources: list[Registration]
    exports: dict[str, Any] = field(default_factory=dict)
    secret_exports: set[str] = field(default_factory=set)
    error: BaseException | None = None

    def of_type(self, type_token: str) -> list[Registration]:
        return [r for r in self.resources if r.type == type_token]

    def one(self, type_token: str, name: str | None = None) -> Registration:
        found = [r for r in self.of_type(type_token) if name is None or r.name == name]
        names = [r.name for r in self.of_type(type_token)]
        assert len(found) == 1, f"expected exactly one {type_token}{' named ' + name if name else ''}; found {names}"
        return found[0]


def ray_pods_role(run: ProgramRun, service_account: str = "ray-train-pods") -> Registration:
    """The Ray pods' Pod Identity role (infra/aws/pod_identity.py): the one whose trust names their service account. The
    idle check and the CloudWatch agent (issue 24) have Pod Identity roles of their own."""
    (role,) = [r for r in run.of_type("aws:iam/role:Role") if "pods.eks.amazonaws.com" in r.inputs["assumeRolePolicy"]
               and f'"{service_account}"' in r.inputs["assumeRolePolicy"]]
    return role


def stack_file(stack: str) -> Path:
    return REPO / f"Pulumi.{stack}.yaml"


def stack_settings(stack: str | None) -> dict[str, Any]:
    """Pulumi.yaml's defaults overlaid with Pulumi.<stack>.yaml's values (None: the defaults alone); the project's
    keys without their prefix (`gpuNodeCount`), others as written (`aws:region`)."""
    settings = {key: spec.get("default") for key, spec in SCHEMA.items()}
    if stack is not None:
        for key, value in (yaml.safe_load(stack_file(stack).read_text()).get("config") or {}).items():
            settings[key.removeprefix(f"{PROJECT}:")] = value
    # Pulumi.yaml's clusterName: empty means ray-train-<stack> (the stack the runs below use: "test" without a file).
    settings["clusterName"] = settings["clusterName"] or f"ray-train-{stack or 'test'}"
    return settings


REFERENCE_DIR = REPO / "tests" / "reference"
"""Upstream files the tests check against (KubeRay CRDs, chart values), copied with their provenance."""


@dataclass(frozen=True)
class Secret:
    """An override set as `pulumi config set --secret` would: the program sees the key among the secret keys."""

    value: Any


def secret_keys(overrides: dict[str, Any] | None) -> list[str]:
    """The namespaced keys of the overrides given as Secret(...)."""
    return [key if ":" in key else f"{PROJECT}:{key}" for key, value in (overrides or {}).items()
            if isinstance(value, Secret)]


def stack_config(stack: str | None, overrides: dict[str, Any] | None = None,
                 project_dir: Path = REPO) -> dict[str, str]:
    """The stack file's config plus overrides, keyed and encoded as the Pulumi CLI hands them to the program.

    Override keys without a namespace belong to the project (`gpuNodeCount` -> `raytrain-eks:gpuNodeCount`).
    The stack file is `project_dir`'s (a test's copy of the project, say).
    """
    values: dict[str, Any] = {}
    if stack is not None:
        values.update(yaml.safe_load((project_dir / f"Pulumi.{stack}.yaml").read_text()).get("config") or {})
    for key, value in (overrides or {}).items():
        values[key if ":" in key else f"{PROJECT}:{key}"] = value.value if isinstance(value, Secret) else value

    def encode(value: Any) -> str:
        if isinstance(value, bool):
            return "true" if value else "false"
        if isinstance(value, (list, tuple, dict)):
            return json.dumps(value)
        return str(value)

    return {key: encode(value) for key, value in values.items()}


def _run(stack: str | None, overrides: dict[str, Any] | None, project_dir: Path = REPO) -> ProgramRun:
    config = stack_config(stack, overrides, project_dir)
    region = config.get("aws:region", "us-west-2")
    mocks = AwsMocks(region)
    monitor = RecordingMonitor(mocks)
    mocks.monitor = monitor

    # Other tests in the same process may use Pulumi's runtime too: leave its config and root as they were.
    previous_config = dict(runtime_config.CONFIG.get())
    previous_secret_keys = list(runtime_config._SECRET_KEYS.get())
    previous_root = settings.get_root_resource()
    pulumi.runtime.set_all_config(config, secret_keys(overrides))
    settings.ROOT.set(None)  # a fresh root Stack per run, so exports do not leak between runs
    pulumi.runtime.set_mocks(mocks, project=PROJECT, stack=stack or "test", preview=False, monitor=monitor)
    settings.SETTINGS.rpc_manager.clear()
    settings.SETTINGS.outputs.clear()

    run = ProgramRun(stack=stack or "test", config=config, resources=monitor.registrations)

    async def collect_exports() -> None:
        root = settings.get_root_resource()
        for key, value in root.outputs.items():
            output = pulumi.Output.from_input(value)
            run.exports[key] = await output.future()
            if await output.is_secret():
                run.secret_exports.add(key)

    def program():
        runpy.run_path(str(PROGRAM), run_name="__main__")
        return collect_exports()

    try:
        with mock.patch.object(capacity_reservation, "describe_existing", describe_existing), \
                mock.patch.object(reservation_end, "describe_tagged", describe_tagged), \
                mock.patch.object(network, "deployer_public_ip", lambda: DEPLOYER_IP), \
                mock.patch.object(offerings, "read_zones_offering", read_zones_offering):
            _sync_await(run_pulumi_func(program))
    except BaseException as e:  # noqa: BLE001 handed to the caller
        run.error = e
    finally:
        pulumi.runtime.set_all_config(previous_config, previous_secret_keys)
        settings.ROOT.set(previous_root)
    return run


def run_program(stack: str | None = "dev", overrides: dict[str, Any] | None = None,
                project_dir: Path = REPO) -> ProgramRun:
    """Run `__main__.py` with `Pulumi.<stack>.yaml` (None: no stack file) plus overrides; raise its error."""
    run = _run(stack, overrides, project_dir)
    if run.error is not None:
        raise run.error
    return run


@functools.cache
def program(stack: str, overrides: tuple[tuple[str, Any], ...] = ()) -> ProgramRun:
    """run_program, once per (stack, overrides) in the whole test session: for tests that only read the run."""
    return run_program(stack, dict(overrides))


def run_program_expecting_error(stack: str | None = "dev", overrides: dict[str, Any] | None = None,
                                project_dir: Path = REPO) -> ProgramRun:
    """Run the program, which must fail; the ProgramRun holds the error and whatever got registered first."""
    run = _run(stack, overrides, project_dir)
    assert run.error is not None, (
        f"expected the program to fail with config {run.config}; it registered {len(run.resources)} resources")
    return run
