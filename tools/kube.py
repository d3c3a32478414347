"""How the operator's commands reach the cluster's API server, and how they word its failures.

`api_client` reads a kubeconfig file (the flag, else $KUBECONFIG or ~/.kube/config) and `talking_to` turns what
can go wrong on the way (no kubeconfig, an `aws` CLI missing for the token, an unreachable or refusing API server)
into one `cli.EnvironmentProblem` line that says how to fix it.
"""
from __future__ import annotations

import os
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

from workload import cli

# Each API call gives up after this long: a private endpoint seen from outside the VPC never answers, and the
# client's default is to wait for the OS (minutes).
REQUEST_TIMEOUT_S = 15

# A kubeconfig's largest plausible size: pulumi-eks's is about 3 KB, and a merged one of a hundred clusters, each with
# its certificate authority inline, stays well under this. Read by workload/user_files.py's rule (no FIFO, no holes).
KUBECONFIG_MAX_BYTES = 4 * 2**20
GET_A_KUBECONFIG = (
    "get one with `pulumi stack output kubeconfig --show-secrets > kubeconfig.json` (then --kubeconfig "
    "kubeconfig.json), or `aws eks update-kubeconfig --name <clusterName> --region <region>`")


def api_client(kubeconfig: Path | None) -> Any:
    """A client for the cluster of `kubeconfig`; None means $KUBECONFIG, else ~/.kube/config."""
    if kubeconfig is not None and kubeconfig.is_dir():
        inside = [path for path in sorted(kubeconfig.iterdir()) if path.is_file() and
                  (path.name == "config" or path.name.startswith("kubeconfig") or path.suffix in (".yaml", ".json"))]
        raise cli.UsageError(f"--kubeconfig {kubeconfig} is a directory; a kubeconfig file is expected"
                             + (f": did you mean --kubeconfig {inside[0]}?" if inside else ""), hint=GET_A_KUBECONFIG)
    if kubeconfig is not None and not kubeconfig.exists():
        # Exit 3 as the help's table says of "no kubeconfig", however it was named.
        raise cli.EnvironmentProblem(f"--kubeconfig {kubeconfig}: no such file", hint=GET_A_KUBECONFIG)
    if kubeconfig is None and not _default_kubeconfig_exists():
        raise cli.EnvironmentProblem("no kubeconfig: none given with --kubeconfig, none at $KUBECONFIG or "
                                     "~/.kube/config", hint=GET_A_KUBECONFIG)
    # Each file the client will read, through the tools' one YAML reader (workload/config_file.py read_document): a
    # regular file within the bound (a FIFO would wait for a writer forever), without aliases (`*name`): PyYAML's
    # safe_load, which the client calls (kubernetes/config/kube_config.py KubeConfigMerger), expands them without
    # bound, and a 1 KB "billion laughs" took 48 s to a MemoryError. kubectl writes no aliases.
    files = _kubeconfig_files(kubeconfig)
    documents = [_document(path, named, refused) for path, named, refused in files]
    from kubernetes import client, config  # once the files are good: its imports take a third of a second

    # A bad file named by the flag is bad input; a bad default one is this machine's set-up.
    unusable = cli.UsageError if kubeconfig is not None else cli.EnvironmentProblem
    configuration = client.Configuration()
    try:
        if kubeconfig is not None:  # the client is handed the document read, never the file again
            document = _mapping(kubeconfig, documents[0] or {})
            _check_token_command(document)
            # Relative certificate paths are the file's directory's, as when the client reads the file itself.
            config.kube_config.KubeConfigLoader(
                config_dict=document, config_base_path=os.path.dirname(os.path.abspath(kubeconfig))
            ).load_and_set(configuration)
        else:  # $KUBECONFIG's files (the client merges them) or ~/.kube/config: the very files read above
            config.load_kube_config(config_file=os.pathsep.join(str(path) for path, _, _ in files),
                                    client_configuration=configuration)
    except (config.ConfigException, OSError, ValueError, TypeError, AttributeError) as error:
        raise unusable(f"the kubeconfig cannot be used: {_first_line(error)}", hint=GET_A_KUBECONFIG) from None
    _check_plain_http_credentials(configuration, kubeconfig, unusable)
    # One try: urllib3's default three retries each log a warning before the same failure.
    configuration.retries = False
    return client.ApiClient(configuration)


def _check_plain_http_credentials(configuration: Any, kubeconfig: Path | None,
                                  unusable: type[cli.CommandError]) -> None:
    """A server named by http:// while the user has a token or a password: the client sends them in the clear on
    every call (kubernetes/config/kube_config.py loads a token, an exec plugin's or `username`/`password` as Basic,
    into api_key['BearerToken'] whatever the server's scheme, and takes TLS settings only for an https server). A
    loopback server (`kubectl proxy` at http://127.0.0.1:8001) never leaves the machine and passes."""
    from urllib.parse import urlsplit

    server = urlsplit(configuration.host or "")
    if server.scheme.lower() != "http" or not configuration.api_key.get("BearerToken"):
        return
    host = server.hostname or ""
    if host == "localhost" or _loopback(host):
        return
    named = f"--kubeconfig {kubeconfig}" if kubeconfig is not None else "the kubeconfig"
    raise unusable(f"{named}: its server is http://{host[:64]}, and its user's credentials (a token or a password) "
                   "would cross the network unencrypted on every call; allowed: an https:// server",
                   hint=GET_A_KUBECONFIG)


def _loopback(host: str) -> bool:
    import ipaddress

    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _document(path: Path, named: str, refused: type[cli.CommandError]) -> Any:
    """The kubeconfig file's YAML document, or `refused` (UsageError for the flag's file, EnvironmentProblem for a
    default one) naming it, never its text."""
    from workload.config_file import read_document

    try:
        return read_document(str(path), named, KUBECONFIG_MAX_BYTES)
    except cli.UsageError as error:
        raise refused(str(error), hint=GET_A_KUBECONFIG) from None


def _mapping(path: Path, document: Any) -> dict:
    """The kubeconfig file's YAML mapping; anything else is refused naming what it is (never its text)."""
    if isinstance(document, dict):
        return document
    if document in ("[secret]", ["secret"]):  # YAML reads pulumi's placeholder as a list
        raise cli.UsageError(f"--kubeconfig {path} holds \"[secret]\": pulumi hid it: run `pulumi stack output "
                             f"kubeconfig --show-secrets > {path}`")
    raise cli.UsageError(f"--kubeconfig {path}: not a kubeconfig (a YAML mapping of clusters, contexts and users), "
                         f"but a {type(document).__name__}", hint=GET_A_KUBECONFIG)


def _check_token_command(kubeconfig: dict) -> None:
    """pulumi-eks's kubeconfig gets its token from `aws eks get-token`; without the AWS CLI the client would log an
    error and carry on with no token, to fail later with a 401 that does not say why."""
    import shutil

    contexts = {item["name"]: item.get("context") or {} for item in kubeconfig.get("contexts") or []}
    users = {item["name"]: item.get("user") or {} for item in kubeconfig.get("users") or []}
    user = users.get(contexts.get(kubeconfig.get("current-context"), {}).get("user"), {})
    command = (user.get("exec") or {}).get("command")
    if command and shutil.which(command) is None:
        raise cli.EnvironmentProblem(
            f"the kubeconfig gets its token by running `{command}`, which is not on PATH",
            hint="install the AWS CLI v2 (https://docs.aws.amazon.com/cli/latest/userguide/getting-started-install.html)")


def _default_paths() -> list[Path]:
    paths = os.environ.get("KUBECONFIG", "").split(os.pathsep) if os.environ.get("KUBECONFIG") else []
    return [Path(path).expanduser() for path in paths or ["~/.kube/config"] if path]


def _default_kubeconfig_exists() -> bool:
    return any(path.exists() and not path.is_dir() for path in _default_paths())


def _kubeconfig_files(kubeconfig: Path | None) -> list[tuple[Path, str, type[cli.CommandError]]]:
    """The files the client will read, each with how a refusal names it and its exit: the flag's file is bad input,
    a default one ($KUBECONFIG's, ~/.kube/config) this machine's set-up."""
    if kubeconfig is not None:
        return [(kubeconfig, f"--kubeconfig {kubeconfig}", cli.UsageError)]
    named = "KUBECONFIG's file" if os.environ.get("KUBECONFIG") else "the kubeconfig"
    return [(path, f"{named} {path}", cli.EnvironmentProblem) for path in _default_paths()
            if path.exists() and not path.is_dir()]


@contextmanager
def talking_to(what: str) -> Iterator[None]:
    """Around API calls: their failures, as one line naming `what` was being asked and what to do."""
    from kubernetes import client, config
    from urllib3.exceptions import HTTPError

    try:
        yield
    except client.ApiException as error:
        if error.status in (401, 403):
            raise cli.EnvironmentProblem(
                f"the API server refused {what} ({error.status} {error.reason})",
                hint="your AWS identity needs an EKS access entry on the cluster (docs/security.md: A teammate), and "
                     "fresh credentials (`aws sso login`)") from None
        raise cli.EnvironmentProblem(f"the API server answered {error.status} {error.reason} to {what}") from None
    except (HTTPError, OSError) as error:
        raise cli.EnvironmentProblem(
            f"the API server cannot be reached for {what}: {_first_line(error)}",
            hint="is the cluster up (`pulumi stack output clusterName`), and is this machine allowed to reach its "
                 "endpoint?") from None
    except config.ConfigException as error:  # the kubeconfig's exec plugin (`aws eks get-token`) failed
        raise cli.EnvironmentProblem(f"no token for the cluster: {_first_line(error)}",
                                     hint="the kubeconfig runs `aws eks get-token`: install the AWS CLI and check "
                                          "`aws sts get-caller-identity`") from None


def _first_line(error: BaseException) -> str:
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__
