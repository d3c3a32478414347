"""The keys Pulumi.yaml declares, and the stack's raw values of them: read with their defaults, unknown keys
refused with the nearest declared one, secrets required where a value may hold a token and never quoted."""
from __future__ import annotations

import copy
import difflib
import functools
import json
import re
from pathlib import Path
from typing import Any, Callable

import pulumi
import yaml

from infra.config.env_names import MAX_ENV_ENTRIES, MAX_ENV_VALUE_CHARS
from infra.config.rules import (
    EKS_PUBLIC_ACCESS_CIDRS_MAX,
    MAX_PIP_REQUIREMENTS,
    MAX_PRINCIPALS,
    MAX_VPC_AZS,
    config_error,
)
from infra.config.settings import SECRET_KEYS, SECRET_VALUED_KEYS
from workload.config import DECLARED
from workload.config.fields import (
    NAME_MAX_LENGTH,
    URI_MAX_LENGTH,
    looks_like_token,
    quotable,
    shown_choice,
    text_problem,
)
from workload.config.secret_text import masked

PROJECT_FILE = Path(__file__).resolve().parents[2] / "Pulumi.yaml"


def schema() -> dict[str, dict[str, Any]]:
    """The `config:` section of Pulumi.yaml: every key with its type, default and description."""
    return copy.deepcopy(_project_document(PROJECT_FILE.stat().st_mtime_ns)["config"])


def project_name() -> str:
    return _project_document(PROJECT_FILE.stat().st_mtime_ns)["name"]


@functools.lru_cache(maxsize=1)
def _project_document(_modified_ns: int) -> dict[str, Any]:
    """Pulumi.yaml, parsed once per version of the file: a preview reads it several times, and PyYAML's pure-Python
    parser takes tens of milliseconds for its some 80 keys."""
    with PROJECT_FILE.open() as f:
        return yaml.safe_load(f)


# What each type's value looks like, in a refusal of another.
TYPE_EXAMPLES = {"integer": " (a whole number, such as 4)", "boolean": " (true or false)"}


def _read_raw(config: Any, key: str, spec: dict[str, Any], hidden: bool = False) -> Any:
    """One key through pulumi.Config, typed by the schema; an unset key takes the schema's default. A refusal of a
    `hidden` key (a secret's) does not quote its value.

    The Pulumi CLI already applies the schema's defaults; reading them here as well keeps a program run
    without the CLI (the unit tests) on the same values, from the same one place.
    """
    readers: dict[str, Callable[[str], Any]] = {
        "string": config.get,
        "integer": config.get_int,
        "boolean": config.get_bool,
        "array": config.get_object,
    }
    kind = spec["type"]
    if kind not in readers:
        raise ValueError(f"Pulumi.yaml: config key {key!r} has type {kind!r}; supported: {sorted(readers)}")
    try:
        value = readers[kind](key)
    except pulumi.ConfigTypeError:
        # Pulumi's message quotes the value whole (a secret pasted into the wrong key, a megabyte): never passed on.
        # A short value that is no token is quoted as every choice's refusal quotes one (fields.shown_choice).
        if hidden or key in SECRET_VALUED_KEYS:
            raise config_error(key, f"must be of type {kind} (its value is not shown)") from None
        raise config_error(key, f"must be of type {kind}{TYPE_EXAMPLES.get(kind, '')}, got "
                                f"{shown_choice(config.get(key) or '')}") from None
    if value is None:
        value = spec["default"]
    if kind == "array":
        if isinstance(value, str):  # get_object returns JSON already parsed; a raw default may be text
            value = json.loads(value)
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            # `pulumi config set --secret --path 'trainSecretEnv.HF_TOKEN' ...` makes an object of the token.
            got = (repr(value) if not (hidden or key in SECRET_VALUED_KEYS) and quotable(repr(value))
                   else f"a {type(value).__name__} (its value is not shown)")
            raise config_error(key, f"must be a list of strings, got {got}")
    return value


def read_raw_config(config: Any | None = None, hidden: frozenset[str] = frozenset()) -> dict[str, Any]:
    """Every key of Pulumi.yaml, read from the stack's config (or its default), by its schema name; refusals of the
    `hidden` keys do not quote their values."""
    config = config if config is not None else pulumi.Config()
    return {key: _read_raw(config, key, spec, key in hidden) for key, spec in schema().items()}


# Characters per value of a string key, and per entry of a list key, beyond a name's (NAME_MAX_LENGTH): the keys that
# set a job flag take their declaration's bound (workload/config/fields.py); these stack-only keys hold a URI, an image
# reference or a pip requirement (which may be a URL), or KEY=VALUE entries (bounded per value by env_names).
TEXT_MAX_LENGTHS = {"dlcImage": URI_MAX_LENGTH, "trainPip": URI_MAX_LENGTH,
                    "trainEnv": MAX_ENV_VALUE_CHARS + NAME_MAX_LENGTH}


# Entries per list key (every `type: array` key of Pulumi.yaml has one; tests/program/test_config_echo_classes.py holds
# the two together), checked before anything reads the entries, so no check walks, or a refusal quotes, a list of
# thousands. Each bound is what the key's consumer takes, or well above any real use.
LIST_MAX_ENTRIES: dict[str, tuple[int, str]] = {
    "vpcAvailabilityZones": (MAX_VPC_AZS, "the VPC is split in eighths, one public and one private subnet per AZ"),
    "capacityCandidateAzs": (MAX_VPC_AZS, "no region has more standard AZs, and each is tried in turn"),
    # EKS's "Public endpoint access CIDR ranges per cluster" quota (Amazon EKS User Guide, "Amazon EKS service quotas";
    # VpcConfigRequest.publicAccessCidrs in the EKS API Reference): 40, not adjustable.
    "apiPublicAccessCidrs": (EKS_PUBLIC_ACCESS_CIDRS_MAX, "EKS's quota of public endpoint CIDRs per cluster, not "
                                                          "adjustable; join neighbours into a shorter prefix"),
    # One EKS access entry each; a team's administrators and viewers are a few roles, and a group of people is one
    # role they assume, not one entry a person.
    "clusterAdmins": (MAX_PRINCIPALS, "each is an EKS access entry; give a group one role its members assume"),
    "clusterViewers": (MAX_PRINCIPALS, "each is an EKS access entry; give a group one role its members assume"),
    # Every worker pip-installs the list at the job's start; a longer one belongs in an image (dlcImage).
    "trainPip": (MAX_PIP_REQUIREMENTS, "every worker installs them at the job's start; build an image (dlcImage) "
                                       "for more"),
    "trainEnv": (MAX_ENV_ENTRIES, "each is an environment variable of every Ray container"),
    "trainSecretEnv": (MAX_ENV_ENTRIES, "each is an environment variable of every Ray container"),
}


def check_list_bounds(raw: dict[str, Any]) -> None:
    """Every list key within its count (LIST_MAX_ENTRIES), first: the refusal names the key and the count only."""
    for key, (bound, why) in LIST_MAX_ENTRIES.items():
        value = raw.get(key)
        if isinstance(value, (list, tuple)) and len(value) > bound:
            raise ValueError(f"config key {key!r}: {len(value)} entries; allowed: at most {bound} ({why})")


_VARIABLE_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}")


def check_text_bounds(raw: dict[str, Any]) -> None:
    """One rule for every free-text key, before any other check reads (or quotes) a value: each list within its count
    (LIST_MAX_ENTRIES), each string, and each entry of a list, within its bound (TEXT_MAX_LENGTHS, the declared one,
    or a name's), and no URI with credentials in it. trainSecretEnv holds credentials on purpose and is bounded by its
    own check (env_names). The refusal names the key and never quotes the value."""
    check_list_bounds(raw)
    declared = {item.stack_key: item.max_length for item in DECLARED if item.stack_key and item.max_length}
    for key, spec in schema().items():
        if key in SECRET_KEYS or spec["type"] not in ("string", "array"):
            continue
        value = raw.get(key)
        entries = [value] if isinstance(value, str) else value if isinstance(value, list) else []
        limit = declared.get(key) or TEXT_MAX_LENGTHS.get(key, NAME_MAX_LENGTH)
        for index, entry in enumerate(entries):
            if isinstance(entry, str) and (why := text_problem(entry, limit)) is not None:
                where = f"entry {index} " if spec["type"] == "array" else ""
                name = entry.partition("=")[0]  # trainEnv's NAME=VALUE: the variable named, as its other refusals do
                if key == "trainEnv" and _VARIABLE_NAME.fullmatch(name) and not looks_like_token(name):
                    where = f"entry {index} ({name}): the value "
                raise ValueError(f"config key {key!r}: {where}{why}")


def stack_config_keys() -> set[str]:
    """Every key the stack sets, namespaced (`raytrain-eks:gpuNodeCount`, `aws:region`).

    pulumi.Config reads one key at a time and has no listing; the runtime's own config map (filled by the language
    host, or by set_all_config) and PULUMI_CONFIG (its older channel) together hold all of them.
    """
    return set(pulumi.runtime.config.CONFIG.get()) | set(pulumi.runtime.config.get_config_env())


def check_unknown_keys(keys: set[str], project: str, declared: set[str]) -> None:
    """Refuse a key of the project's namespace that Pulumi.yaml does not declare: Pulumi ignores it silently, so a
    typo (`gpuNodeCout`) would run the stack on the default. So is a declared key under another namespace
    (`raytrain:trainSteps`, `aws:gpuNodeCount`) or none (`trainSteps:` written by hand): Pulumi gives it to no
    program, and the stack ran on the default as silently."""
    misplaced = sorted(key for key in keys if key.partition(":")[0] != project and (key.partition(":")[2] or key)
                       in declared)
    if misplaced:
        namespace, colon, name = misplaced[0].partition(":")
        where = f"under the namespace {namespace!r}" if colon else "without a namespace"
        raise config_error(tuple(misplaced), f"{name or namespace} is this project's key, and {where} Pulumi gives it "
                                             f"to no program; write it as {project}:{name or namespace} (`pulumi config "
                                             f"set {name or namespace} VALUE` does)")
    unknown = sorted(key.partition(":")[2] for key in keys if key.partition(":")[0] == project
                     and key.partition(":")[2] not in declared)
    if not unknown:
        return
    hints, unmatched = [], False
    for key in unknown:
        nearest = difflib.get_close_matches(key, declared, n=1)
        hints.append(f"{key!r} (did you mean {nearest[0]!r}?)" if nearest else repr(key))
        unmatched |= not nearest
    # The whole list would be one very long line (some 60 keys); their prefixes say where to look.
    families = sorted({re.match(r"[a-z]+", key).group(0) for key in declared})
    allowed = (f"a key Pulumi.yaml declares (they start {', '.join(families)}; each with its meaning there)"
               if unmatched else "the key it means")
    raise config_error(tuple(unknown), f"not declared in Pulumi.yaml, so Pulumi would ignore {', '.join(hints)}; "
                                       f"`pulumi config rm {project}:{unknown[0]}`, and use {allowed}")


def check_secret_keys(raw: dict[str, Any], project: str, is_secret: Callable[[str], bool]) -> None:
    """Refuse a SECRET_KEYS value stored in plain text: it would sit readable in the committed stack file."""
    for key in SECRET_KEYS:
        if raw[key] and not is_secret(f"{project}:{key}"):
            raise config_error(
                key, f"stored in plain text in the stack file; set it as a secret: `pulumi config rm {key}`, then "
                     f"`pulumi config set --secret --path '{key}[0]' NAME=VALUE`")


def is_stack_secret(key: str) -> bool:
    """Whether the stack holds a namespaced key as a secret, by either channel the CLI passes that by."""
    return pulumi.runtime.is_config_secret(key) or key in pulumi.runtime.get_config_secret_keys_env()


def secret_fragments() -> list[str]:
    """What a message must not quote: the values of every key the stack holds as a secret (and of SECRET_KEYS, which
    must be one), as each string in them and each VALUE of a KEY=VALUE, from the config as the CLI passed it. A plain
    trainEnv is in the committed stack file already; its refusals name its entries without their values anyway."""
    project = project_name()
    fragments: list[str] = []

    def collect(value: Any) -> None:
        if isinstance(value, dict):
            value = list(value.values())
        if isinstance(value, list):
            for item in value:
                collect(item)
        elif isinstance(value, str):
            # The value as a refusal may quote it: whole, after its NAME=, each item of a comma list (a secret
            # trainLoraTargets' one unknown name), and escaped as repr() and JSON write it.
            pieces = [value, value.partition("=")[2], *re.split(r"[,;\s]+", value)]
            fragments.extend(pieces + [form for piece in pieces for form in (repr(piece)[1:-1], json.dumps(piece)[1:-1])])

    for key in schema():
        namespaced = f"{project}:{key}"
        text = pulumi.runtime.get_config(namespaced)
        if text is None or not (key in SECRET_KEYS or is_stack_secret(namespaced)):
            continue
        try:
            collect(json.loads(text))
        except ValueError:
            collect(text)
    # Three characters at least: a shorter "secret" would blank out ordinary words of the message.
    return sorted({fragment for fragment in fragments if len(fragment) >= 3}, key=len, reverse=True)


def hides_secret_values(check: Callable[..., Any]) -> Callable[..., Any]:
    """A preview check whose refusals never quote a secret's value: any that would is re-raised with it blanked
    out (and without the exception it came from, whose text may quote it too). A secret is a value the stack holds
    with --secret, and anything shaped like a credential whichever key holds it (workload/config/secret_text.py)."""

    @functools.wraps(check)
    def checked(*args: Any, **kwargs: Any) -> Any:
        try:
            return check(*args, **kwargs)
        except ValueError as error:
            message = masked(redact_secrets(str(error)))
            if message == str(error):
                raise
            raise ValueError(message) from None

    return checked


def redact_secrets(message: str) -> str:
    """`message` with every secret config value (secret_fragments) blanked out as [secret]."""
    for fragment in secret_fragments():
        message = message.replace(fragment, "[secret]")
    return message


def warn(message: str) -> None:
    """The program's one way to warn at preview: a warning quotes values (an image, a model id) as refusals do, and a
    key the stack holds as a secret may be any of them, so it is blanked out as in a refusal (hides_secret_values).
    tests/program/test_config_echo_classes.py holds the tree to it: no other pulumi.log.warn."""
    pulumi.log.warn(masked(redact_secrets(message)))
