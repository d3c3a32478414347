"""trainEnv and trainSecretEnv names the stack does not take: each would take over what another part of the stack sets
on purpose (the pods' AWS identity, the loader and Python paths of the image, the job's own NCCL and libfabric
settings), and a bound on how many entries the two keys hold. A refusal names the variable and the key that sets its
setting properly; it never quotes a value."""
from __future__ import annotations

import posixpath
import re
from urllib.parse import unquote

from infra.config.storage_bounds import PSEUDO_FILE_SYSTEMS
from workload.storage import CHECKPOINT_STAGING_ENV, DATA_CACHE_ENV

# The Ray pods' AWS identity is EKS Pod Identity's role, scoped to trainStoragePath's prefix and trainDataset's and
# trainModelId's objects (infra/aws/pod_identity.py). Any of these in the job's environment replaces it for the job
# and every library it loads (botocore's credential chain reads the environment first: static keys, then profiles and
# web identity, then the container credential provider's AWS_CONTAINER_CREDENTIALS_* that Pod Identity itself sets).
_AWS_IDENTITY = ("the Ray pods' AWS identity is EKS Pod Identity's role; grant it data through trainStoragePath, "
                 "trainDataset and trainModelId")
_LOADER = ("it changes what the image's Python and libraries load for every rank; add packages with trainPip, or "
           "build an image (dlcImage)")
_INSTALLED = ("it changes what code is installed or run (another package index, or a script every shell sources); "
              "add packages with trainPip from PyPI, or build an image (dlcImage)")
_REDIRECT = ("it sends the job's tokens and data to another host than the one its stack key names; set "
             "trainMlflowTrackingUri for MLflow, and leave the Hub's and W&B's endpoints as they are")
_INTERCEPT = "it lets another host read or alter the job's requests, tokens included; the pods reach the internet directly"
_EXPOSES = ("it writes the job's TLS session keys to a file, with which anyone holding the file reads every request, "
            "tokens included")
_REMOTE_CODE = ("it lets a library run code that a model or dataset repository ships; the project loads only the "
                "architectures it knows (trainModelId) and datasets as data")
_TOKEN_ELSEWHERE = ("it holds or points at a token under another name; set the token as HF_TOKEN or WANDB_API_KEY in "
                    "trainSecretEnv")
# The node-local directories the stack names on every Ray worker (infra/kubernetes/local_storage.py DIRECTORIES: the
# Hugging Face cache, the checkpoint staging and the data stage's token cache, on the node's NVMe or sized root volume).
# Another value moves that data off the volume, to a path the pod may lack or not write (HF_HOME=/proc/hf fails the
# model's download after the GPUs bill) or onto the container's small writable layer; the preview cannot see the pod's
# file system, so the layout keeps them. RESERVED_ENV_WORDS holds the names that move a part of HF_HOME elsewhere.
_NODE_LOCAL = ("the stack puts it on the node's local volume (infra/kubernetes/local_storage.py), where the model's "
               "download, the data cache and the checkpoint staging have room; a path of the pod is not the stack "
               "config's to choose")
# git runs what these name through the shell (GIT_SSH_COMMAND, GIT_PROXY_COMMAND, GIT_EXTERNAL_DIFF, the editors and
# pager), runs the programs they point at (GIT_SSH, GIT_ASKPASS, GIT_EXEC_PATH, GIT_TEMPLATE_DIR's hooks), or sets any
# configuration, core.sshCommand and core.fsmonitor included (GIT_CONFIG_COUNT with GIT_CONFIG_KEY_n/VALUE_n,
# GIT_CONFIG_PARAMETERS, GIT_CONFIG_GLOBAL). The whole GIT_ family, by its prefix (last in RESERVED_ENV_WORDS, so that
# GIT_SSL_NO_VERIFY is refused for what VERIFY says): the job runs no git of its own (models and datasets come over the
# Hub's HTTP API, trainPip's packages by name from PyPI), so it needs no GIT_* variable, and a list of git's commands
# would miss the next one git adds. ssh runs SSH_ASKPASS (SSH_ASKPASS_REQUIRE says when) for any git over ssh.
_RUNS_COMMAND = ("git or ssh runs the command or program it names (or a configuration that names one) in every rank "
                 "that starts one; the job runs no git, so it needs none of them")
RESERVED_ENV = {
    **dict.fromkeys(("HF_HOME", CHECKPOINT_STAGING_ENV, DATA_CACHE_ENV), _NODE_LOCAL),
    **dict.fromkeys(("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_SECURITY_TOKEN",
                     "AWS_PROFILE", "AWS_DEFAULT_PROFILE", "AWS_SHARED_CREDENTIALS_FILE", "AWS_CONFIG_FILE",
                     "AWS_ROLE_ARN", "AWS_ROLE_SESSION_NAME", "AWS_WEB_IDENTITY_TOKEN_FILE", "AWS_CA_BUNDLE",
                     "AWS_EC2_METADATA_SERVICE_ENDPOINT", "AWS_EC2_METADATA_DISABLED"), _AWS_IDENTITY),
    **dict.fromkeys(("LD_PRELOAD", "LD_LIBRARY_PATH", "LD_AUDIT", "PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP",
                     "PYTHONUSERBASE", "PYTHONSAFEPATH", "PYTHONEXECUTABLE"), _LOADER),
    # Python imports the module a warning filter names (PYTHONWARNINGS=ignore::pkg.Category) and the callable
    # PYTHONBREAKPOINT names; OpenSSL reads a configuration that loads providers and engines (.so files) from
    # OPENSSL_CONF, and loads them from OPENSSL_MODULES and OPENSSL_ENGINES, in every process that makes a TLS request.
    **dict.fromkeys(("PYTHONWARNINGS", "PYTHONBREAKPOINT", "OPENSSL_CONF", "OPENSSL_CONF_INCLUDE", "OPENSSL_MODULES",
                     "OPENSSL_ENGINES"), _LOADER),
    # NSS, OpenSSL-based clients, curl and Python's ssl (3.8+) append every TLS session's keys to this file.
    "SSLKEYLOGFILE": _EXPOSES,
    # What code is installed or run: pip reads its index, extra indexes, find-links and config file from these (so
    # trainPip's packages would come from another host), and bash sources BASH_ENV (sh: ENV) before any script it runs.
    **dict.fromkeys(("PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL", "PIP_CONFIG_FILE", "PIP_FIND_LINKS", "PIP_TRUSTED_HOST",
                     "BASH_ENV", "ENV"), _INSTALLED),
    # Set on the Ray workers from their own stack keys (infra/config/parse.py, transport_env); trainExpectTransport and
    # the preview's transport checks read those keys, so a second value here would contradict what they checked.
    "NCCL_DEBUG": "set it with the stack key ncclDebug",
    # NCCL prints only the subsystems named here: the INIT and NET lines the transport check reads would go.
    "NCCL_DEBUG_SUBSYS": "it filters out the NCCL log lines the job's transport check reads (trainExpectTransport)",
    "NCCL_SOCKET_IFNAME": "set it with the stack key ncclSocketIfname",
    "FI_PROVIDER": "set it with the stack key fiProvider",
    "NCCL_NET_PLUGIN": "set it with the stack key ncclNetPlugin",
    # The job's driver joins the Ray cluster RAY_ADDRESS names (workload/trainer.py): Ray's job runner sets it to the
    # stack's own cluster, and another value would run the training on another cluster, or fail to find one.
    "RAY_ADDRESS": "the job's driver must join its own cluster, whose address Ray's job runner sets",
    # Ray sets each GPU worker's CUDA_VISIBLE_DEVICES to the GPU it assigned (ray/_private/accelerators/nvidia_gpu.py,
    # set_current_process_visible_accelerator_ids); one set for the whole job hides or doubles GPUs across ranks.
    "CUDA_VISIBLE_DEVICES": "Ray sets it on each worker to the GPU it assigned; give trainNumWorkers to use fewer GPUs",
    # Where a token is sent: each of these sends the Hub's, W&B's or MLflow's token (from trainSecretEnv) to the host
    # it names, or reads every request in between (a proxy, a trusted CA bundle). huggingface_hub reads HF_ENDPOINT
    # (constants.py), wandb WANDB_BASE_URL (its settings' base_url), MLflow MLFLOW_TRACKING_URI, and MLflow's Databricks
    # store and the Databricks SDK DATABRICKS_HOST (the workspace DATABRICKS_TOKEN is sent to: the SDK's unified
    # authentication, mlflow/utils/databricks_utils.py); requests and httpx honour the proxy and CA variables.
    **dict.fromkeys(("HF_ENDPOINT", "HF_HUB_ENDPOINT", "HF_INFERENCE_ENDPOINT", "WANDB_BASE_URL", "MLFLOW_TRACKING_URI",
                     "MLFLOW_REGISTRY_URI", "DATABRICKS_HOST"), _REDIRECT),
    **dict.fromkeys(("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy",
                     "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE", "SSL_CERT_FILE", "SSL_CERT_DIR"), _INTERCEPT),
    # A token under another name: read as the token by its library, but not one of the names trainEnv refuses. NETRC
    # names the file wandb reads its key from (machine api.wandb.ai) and requests reads any host's login from;
    # DATABRICKS_CONFIG_FILE the .databrickscfg whose profiles hold a workspace's host and token together.
    **dict.fromkeys(("HUGGING_FACE_HUB_TOKEN", "HF_API_TOKEN", "HF_TOKEN_PATH", "WANDB_IDENTITY_TOKEN_FILE", "NETRC",
                     "DATABRICKS_CONFIG_FILE"), _TOKEN_ELSEWHERE),
}
# Families of names: the container credential provider's (FULL_URI, RELATIVE_URI, AUTHORIZATION_TOKEN[_FILE], and any
# added later) and the endpoint overrides (AWS_ENDPOINT_URL, AWS_ENDPOINT_URL_S3, ...), which send the job's S3 calls,
# signed with the pods' credentials, to another host.
# Whole families: every PIP_* variable is one of pip's options (PIP_REQUIREMENT, PIP_CONSTRAINT and PIP_SRC install
# from elsewhere as PIP_INDEX_URL does: pip's "Environment Variables" docs); the interpreter's PYTHON* variables
# change what it loads and how (PYTHONPLATLIBDIR: where compiled modules come from), but for the few below; NCCL
# reads NCCL_CONF_FILE's NCCL_* settings, the reserved ones included.
RESERVED_ENV_PREFIXES = {"AWS_CONTAINER_": _AWS_IDENTITY, "AWS_ENDPOINT_URL": _AWS_IDENTITY, "PIP_": _INSTALLED,
                         "PYTHON": _LOADER, "NCCL_CONF_FILE": _LOADER}
# Families by a word of the name, for what no list keeps up with: a name that loads code, points a library at code or
# certificates, or turns verification off. Search paths (GCONV_PATH: glibc loads iconv modules from it; FI_PROVIDER_PATH:
# libfabric's providers; LD_LIBRARY_PATH, PYTHONPATH, ...), plugins (NCCL_TUNER_PLUGIN, NCCL_PROFILER_PLUGIN: a .so
# NCCL loads into every rank), preloads and hooks (RAY_RUNTIME_ENV_HOOK: a function Ray imports and calls), anything
# INSECURE or *VERIFY* (MLFLOW_TRACKING_INSECURE_TLS, PYTHONHTTPSVERIFY), certificates and CA bundles, proxies, and
# endpoints. The job needs none of them from its user: those the project sets it sets itself (the exact names above).
_LOADS_CODE = ("it makes every rank load code from where the variable points (a search path, a plugin, a preloaded "
               "library or a hook); add packages with trainPip, or build an image (dlcImage)")
_VERIFICATION = ("it turns TLS verification off or replaces the certificates it trusts, so another host can read or "
                 "alter the job's requests, tokens included")
RESERVED_ENV_WORDS = (
    (re.compile(r"PATHS?$"), _LOADS_CODE),
    (re.compile(r"PLUGIN|PRELOAD|HOOK"), _LOADS_CODE),
    (re.compile(r"INSECURE|VERIFY|CERT|CA_?BUNDLE|CA_?FILE|CA_?INFO"), _VERIFICATION),
    (re.compile(r"(^|_)PROXY$"), _INTERCEPT),
    (re.compile(r"ENDPOINT"), _REDIRECT),
    # HF_DATASETS_TRUST_REMOTE_CODE, and any library's switch of that name: a repository's own code on every rank.
    (re.compile(r"TRUST_?REMOTE_?CODE"), _REMOTE_CODE),
    (re.compile(r"KEY_?LOG"), _EXPOSES),
    # A part of HF_HOME by another name: huggingface_hub's HF_HUB_CACHE, HF_XET_CACHE, HF_ASSETS_CACHE (constants.py)
    # and their HUGGINGFACE_* forms, datasets' HF_DATASETS_CACHE, transformers' TRANSFORMERS_CACHE, HF_MODULES_CACHE.
    (re.compile(r"^(HF|HUGGINGFACE|TRANSFORMERS|PYTORCH_TRANSFORMERS|PYTORCH_PRETRAINED_BERT)(_\w+)?_(CACHE|HOME)$"),
     _NODE_LOCAL),
    (re.compile(r"^(GIT_|SSH_ASKPASS)"), _RUNS_COMMAND),
)
# NO_PROXY only narrows what a proxy sees, and the pods have none.
# The interpreter's switches that change no code it loads: output buffering, hashing, encodings, tracebacks.
NOT_RESERVED = frozenset({"NO_PROXY", "PYTHONUNBUFFERED", "PYTHONHASHSEED", "PYTHONIOENCODING", "PYTHONUTF8",
                          "PYTHONFAULTHANDLER", "PYTHONDONTWRITEBYTECODE", "PYTHONPYCACHEPREFIX", "PYTHONNOUSERSITE",
                          "PYTHONOPTIMIZE", "PYTHONTRACEMALLOC", "PYTHONDEVMODE",
                          # pip's options that change how it installs, never from where or what
                          "PIP_NO_CACHE_DIR", "PIP_CACHE_DIR", "PIP_DISABLE_PIP_VERSION_CHECK", "PIP_PROGRESS_BAR",
                          "PIP_QUIET", "PIP_VERBOSE", "PIP_DEFAULT_TIMEOUT", "PIP_TIMEOUT", "PIP_RETRIES",
                          "PIP_NO_INPUT", "PIP_ROOT_USER_ACTION", "PIP_PREFER_BINARY", "PIP_ONLY_BINARY"})
# Entries per key, and characters per value. Each entry is an environment variable of every Ray container and of the
# job's runtime_env; no job the project knows sets more than a handful, and a larger set belongs in the image.
MAX_ENV_ENTRIES = 64
MAX_ENV_VALUE_CHARS = 32768


def reserved_reason(name: str) -> str | None:
    """Why the job may not set `name` (and what sets it properly), or None when it may. By the name in capitals: some
    readers take any case (Python's urllib and requests read `Https_Proxy`), and a name that differs from a reserved
    one only in case is that name meant, or a mistake."""
    upper = name.upper()
    if upper in NOT_RESERVED:
        return None
    if upper in RESERVED_ENV:
        return RESERVED_ENV[upper]
    if (why := next((why for prefix, why in RESERVED_ENV_PREFIXES.items() if upper.startswith(prefix)), None)):
        return why
    return next((why for word, why in RESERVED_ENV_WORDS if word.search(upper)), None)


# A name that says it holds a credential: in trainEnv its value would be plain in the stack's config and on Ray's
# dashboard (a job's runtime_env), whatever library reads it. One rule for every such name, not a list of tokens: a
# word that names one anywhere in the name (PGPASSWORD, DB_PASSWORD_FILE, MY_SECRET, GITHUB_TOKEN, MY_API_KEY,
# GOOGLE_APPLICATION_CREDENTIALS), or a last word that abbreviates one (MYSQL_PWD, SMTP_PASS, LDAP_PASSWD, REDIS_PW,
# BASIC_AUTH). TOKEN only as a word's end (TOKENIZERS_PARALLELISM and MAX_TOKENS are no credential).
_CREDENTIAL_NAME = re.compile(r"PASSWORD|PASSWD|SECRET|CREDENTIAL|API_?KEY|PRIVATE_?KEY|ACCESS_?KEY|TOKEN(_|$)|"
                              r"PASSPHRASE|CONNECTION_?STRING|_(PWD|PASS|PW|AUTH|AUTHORIZATION|KEY|PAT)$")
# Names of that shape that hold a switch, not a credential.
NOT_CREDENTIALS = frozenset({"HF_HUB_DISABLE_IMPLICIT_TOKEN"})


def holds_credential(name: str) -> bool:
    """Whether the variable `name` holds a credential by its name (HF_TOKEN, MLFLOW_TRACKING_PASSWORD, MY_API_KEY)."""
    return name not in NOT_CREDENTIALS and bool(_CREDENTIAL_NAME.search(name.upper()))



# A variable that carries request headers: OpenTelemetry's OTEL_EXPORTER_OTLP_HEADERS and its per-signal forms
# OTEL_EXPORTER_OTLP_{TRACES,METRICS,LOGS}_HEADERS (opentelemetry.io, "OTLP Exporter Configuration": "Key-value pairs to
# be used as headers associated with gRPC or HTTP requests", k1=v1,k2=v2 in the W3C Baggage format, values
# percent-encoded), and any library's *_HEADERS of that form. A hosted collector takes its credential in such a header
# (Authorization=Basic ..., x-api-key=..., a vendor's *-token), which trainEnv would show plain on Ray's dashboard. One
# rule: a header-list variable naming a credential header, by the header's name as holds_credential reads a variable's
# (API-KEY as API_KEY), or HTTP's own credential headers (RFC 9110 Authorization and Proxy-Authorization; Cookie).
_HEADER_LIST_NAME = re.compile(r"(^|_)HEADERS$")
_CREDENTIAL_HEADERS = frozenset({"AUTHORIZATION", "PROXY_AUTHORIZATION", "COOKIE"})


def carries_credential_header(name: str, value: str) -> bool:
    """Whether `name`=`value` is a header list (k1=v1,k2=v2) holding a credential header (never quoted by the caller)."""
    if not _HEADER_LIST_NAME.search(name.upper()):
        return False
    for entry in value.split(","):
        header, separator, _ = entry.partition("=")
        header = unquote(header).strip().upper().replace("-", "_")
        if separator and header and (header in _CREDENTIAL_HEADERS or holds_credential(header)):
            return True
    return False


# A reference to another variable in a trainEnv value: Ray's runtime_env expands ${NAME} in env_vars (and a shell
# $NAME), so WANDB_ENTITY=${HF_TOKEN} would copy trainSecretEnv's token into a plain variable that W&B sends away.
_REFERENCE = re.compile(r"\$[{A-Za-z_]")


def refers_to_variable(value: str) -> bool:
    """Whether `value` holds ${NAME} or $NAME (never quoted by the caller)."""
    return bool(_REFERENCE.search(value))


# A variable that names a directory, by the last word libraries give such names (TORCHINDUCTOR_CACHE_DIR, TRITON_HOME,
# XDG_CACHE_HOME, TRITON_CACHE, CUDA_CACHE_PATH, TMPDIR, ...): under a kernel pseudo file system (/proc, /sys, /dev:
# storage_bounds.PSEUDO_FILE_SYSTEMS) no directory can be made, so the library's os.makedirs fails on every rank at its
# first use (torch.compile's cache at the first compiled forward), after the GPUs bill. /dev/shm is a tmpfs where
# directories can be made (the pods mount one for NCCL and the data loaders), so it stays allowed.
_DIRECTORY_NAME = re.compile(r"(_DIR|_HOME|_CACHE|_PATH|_ROOT)$|^TMPDIR$")
_WRITABLE_UNDER_DEV = "/dev/shm"


def pseudo_directory_reason(name: str, value: str) -> str | None:
    """Why `name`=`value` names a directory no library can make (under /proc, /sys or /dev but /dev/shm), or None. The
    reason names the file system only, never the value."""
    if not _DIRECTORY_NAME.search(name.upper()) or not value.startswith("/"):
        return None
    path = "/" + posixpath.normpath(value).lstrip("/")  # POSIX keeps a leading //, which Linux reads as /
    top = "/" + path.split("/")[1]
    if top not in PSEUDO_FILE_SYSTEMS or path == _WRITABLE_UNDER_DEV or path.startswith(_WRITABLE_UNDER_DEV + "/"):
        return None
    return (f"it names a directory under {top}, a kernel pseudo file system where no directory can be made, so its "
            "library fails on every rank at its first use; allowed: a path on the node's disk (/tmp/...) or under "
            "/dev/shm")


# Characters no process's environment can hold. A NUL (U+0000) ends the C string NAME=VALUE that execve(2) passes in
# envp ("an array of pointers to strings": each string ends at its first NUL; man 2 execve), so CPython's os.environ
# and subprocess refuse it ("ValueError: embedded null byte", Modules/posixmodule.c), and Kubernetes hands env to the
# container runtime as the same strings: the variable could never reach the job as written.
UNPASSABLE = {"\x00": "NUL"}


def unpassable_reason(value: str) -> str | None:
    """Why a variable's value cannot be given to a process (a NUL), named by the character's position, or None."""
    for char, what in UNPASSABLE.items():
        if (index := value.find(char)) >= 0:
            return (f"holds a {what} (U+{ord(char):04X}) at character {index}, which no process's environment can "
                    "hold: execve passes each NAME=VALUE as a C string, ended by its first NUL")
    return None
