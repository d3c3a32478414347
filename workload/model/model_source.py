"""What a --model_id (trainModelId) names, and its config.json read in a second: mistakes answered in the user's words.

A --model_id is a Hugging Face Hub id (org/name), a local directory (config.json and *.safetensors, what
save_pretrained writes), or s3://bucket/prefix/. `problem` says, without any network, what is wrong with one that is
none of these: a web address (the Hub id it holds is named), a malformed id (`Qwen/../../../etc/passwd`), a
path that is not there. TrainConfig runs it, so the local run, the job and the preview (trainModelId) refuse the
same ids in the same words.

`hub_config_directory` reads a Hub model's config.json with one request and no retries: an unreachable Hub (offline,
a typo'd HF_ENDPOINT) is `Unreachable` at once, where huggingface_hub's own download retries a refused connection five
times over 23 s (utils/_http.py http_backoff); a gated model without a token names HF_TOKEN and the stack's
`pulumi config set --secret` command; a repo that does not exist says so. Standard library at import time.
"""
from __future__ import annotations

import contextlib
import contextvars
import json
import os
import re
import shutil
import tempfile
from typing import Iterator

from workload.model import config_json

# The variables that put huggingface_hub offline, in the order it reads them (constants.py: HF_HUB_OFFLINE, else
# transformers' older TRANSFORMERS_OFFLINE); datasets also reads its own HF_DATASETS_OFFLINE for a dataset.
OFFLINE_VARIABLES = ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")
DATASETS_OFFLINE_VARIABLES = ("HF_DATASETS_OFFLINE", *OFFLINE_VARIABLES)


def offline_variable(names: tuple[str, ...] = OFFLINE_VARIABLES) -> str | None:
    """The variable the user set that keeps the Hub offline (named in a refusal as they set it), or None."""
    return next((name for name in names if os.environ.get(name, "").upper() in ("1", "ON", "YES", "TRUE")), None)

# huggingface_hub's validate_repo_id (utils/_validators.py REPO_ID_REGEX and its checks): an optional namespace and a
# name of word characters, '-' and '.', 96 at most each, starting and ending on a word character; no '--' or '..'
# anywhere and no '.git' ending.
HUB_ID = re.compile(r"^(\b[\w\-.]{1,96}\b/)?\b[\w\-.]{1,96}\b$", re.ASCII)
HUB_HOSTS = ("huggingface.co", "www.huggingface.co", "hf.co")
PATH_PREFIXES = ("/", "./", "../", "~")
NO_MODEL_DIRECTORY = ("no such directory on this machine; a local model is a directory holding config.json and "
                      "*.safetensors (what save_pretrained writes)")
NO_TOKENIZER_DIRECTORY = ("no such directory on this machine; a tokenizer is a directory of its files (what "
                          "save_pretrained writes) or a Hugging Face id")
# One request's time limit, and no retries: a Hub that does not answer in this time is reported as not reachable.
HUB_TIMEOUT_S = 10
CONFIG_FILE = "config.json"
MAX_CONFIG_BYTES = config_json.MAX_CONFIG_BYTES  # one bound for every reader of a config.json
# The weights the job loads (workload/model/weights.py): one model.safetensors, or the shards the index lists.
SAFETENSORS_FILE = "model.safetensors"
SAFETENSORS_INDEX = "model.safetensors.index.json"
# Weights in other formats, named in the refusal of a repo that holds only these (PyTorch's pickles, TF's, Flax's).
OTHER_WEIGHTS = (".bin", ".pth", ".pt", ".ckpt", ".h5", ".msgpack", ".gguf")
TOKEN_VARIABLE = "HF_TOKEN"
SECRET_COMMAND = f"pulumi config set --secret --path 'trainSecretEnv[0]' {TOKEN_VARIABLE}=..."
ALLOWED = "allowed: a Hub id (org/name), a local model directory, or s3://bucket/prefix/"


class Unreachable(Exception):
    """The model's source did not answer (no network, a host that does not resolve): the environment, not the id."""


class NeedsToken(Exception):
    """A gated or private model, and no token (or one without access) to read it with."""


_ID_CHARACTER = re.compile(r"[^A-Za-z0-9._/-]")


def _shown_id(repo_id: str) -> str:
    """A refused id as a refusal may quote it: up to its first character no id has (what follows a '?' or '#' may be
    a token: org/tok?token=...), and at most 200 characters."""
    bad = _ID_CHARACTER.search(repo_id)
    shown = repo_id[:min(bad.start() if bad else len(repo_id), 200)]
    if len(shown) == len(repo_id):
        return repr(repo_id)
    what = f"a {repo_id[bad.start()]!r}" if bad and bad.start() < 200 else "more"
    return f"{shown!r} then {what} (the rest not shown)"


def hub_id_problem(repo_id: str, *, owner: bool = False) -> str | None:
    """Why the Hub would refuse `repo_id` (the words after the flag or key), or None: huggingface_hub's own rule,
    utils.validate_repo_id, which its upload and download functions apply; with `owner`, an owner/name as an upload
    needs. Without huggingface_hub on this machine, the same rule from HUB_ID."""
    allowed = ("a Hub repo id as huggingface_hub takes it: " + ("owner/name" if owner else "[owner/]name")
               + ", each 1-96 ASCII letters, digits, '-', '_' or '.', not starting or ending with '-' or '.', without "
               "'--', '..' or a '.git' ending")
    if owner and repo_id.count("/") != 1:
        return f"must be {allowed}, got {_shown_id(repo_id)}{_repo_of_file(repo_id)}"
    try:
        from huggingface_hub.utils import HFValidationError, validate_repo_id
    except ImportError:
        refused = (not HUB_ID.match(repo_id) or "--" in repo_id or ".." in repo_id or repo_id.endswith(".git")
                   or repo_id.count("/") > 1)
        return f"must be {allowed}, got {_shown_id(repo_id)}{_repo_of_file(repo_id)}" if refused else None
    try:
        validate_repo_id(repo_id)
    except HFValidationError:
        return f"must be {allowed}, got {_shown_id(repo_id)}{_repo_of_file(repo_id)}"
    return None


def _repo_of_file(value: str) -> str:
    """A file path after a Hub id (Qwen/Qwen2.5-1.5B/tokenizer.json, what a Hub page's address shows): the words
    naming the repo the user meant, or "". The Hub's ids have one '/' at most, and every setting that takes one reads
    the repo whole (a model or tokenizer directory, a dataset by its id)."""
    parts = value.split("/")
    repo_id = "/".join(parts[:2])
    if len(parts) < 3 or not HUB_ID.match(repo_id) or "--" in repo_id or ".." in repo_id:
        return ""
    return f"; did you mean {repo_id} (the repo; a file inside one is not taken)"


# What a local --model_id is (and a local --tokenizer, its tokenizer files), for a refusal of one of its files.
LOCAL_MODEL = "the directory holding config.json and *.safetensors (what save_pretrained writes)"
LOCAL_TOKENIZER = "the directory holding the tokenizer files (tokenizer.json, tokenizer_config.json)"


def missing_directory(name: str) -> bool:
    """A --model_id or --tokenizer written as a path that names no directory here: meant on this machine, and not a
    Hub id (which transformers would answer by its rules for repo ids, after seconds of imports)."""
    return name.startswith(PATH_PREFIXES) and not os.path.isdir(os.path.expanduser(name))


def is_path(model_id: str) -> bool:
    return model_id.startswith(PATH_PREFIXES) or os.path.isdir(os.path.expanduser(model_id))


# What the Hub's URL paths start with for a repo that is not a model (huggingface_hub's REPO_TYPES_URL_PREFIXES).
HUB_KIND_PREFIXES = {"datasets": "dataset", "spaces": "Space"}


def hub_web_page(value: str) -> tuple[str, str] | None:
    """(kind, repo id) of the Hub web page an http(s) address on the Hub's host names (`https://huggingface.co/
    datasets/lab/chats/blob/main/x.jsonl` is ("dataset", "lab/chats")); the id is "" when the path names none the Hub
    takes. None for any other value."""
    scheme, separator, rest = value.strip().partition("://")
    host, _, path = rest.partition("/")
    if not separator or scheme.lower() not in ("http", "https") or host.lower() not in HUB_HOSTS:
        return None
    parts = [part for part in path.split("?")[0].split("#")[0].split("/") if part]
    kind = HUB_KIND_PREFIXES.get(parts[0], "model") if parts else "model"
    parts = parts[1:] if kind != "model" else parts
    repo_id = "/".join(parts[:2])
    return kind, repo_id if len(parts) >= 2 and hub_id_problem(repo_id, owner=True) is None else ""


def problem(model_id: str) -> str | None:
    """Why `model_id` cannot name a model, in one line (its caller prefixes the flag or key); None when it can. No
    network: whether a Hub id exists is for `hub_config_directory`."""
    if os.path.isfile(os.path.expanduser(model_id)):
        return f"a file; give {LOCAL_MODEL}"
    if is_path(model_id):
        return None  # a directory is checked where it is read
    scheme, separator, rest = model_id.partition("://")
    if separator:
        page = hub_web_page(model_id)
        if page is not None and page[0] == "model" and page[1]:
            return f"a web address; give the Hub id it names: {page[1]}"
        if scheme in ("http", "https"):
            from workload.s3_names import s3_hint

            return f"a web address, which the job does not download models from; {ALLOWED}{s3_hint(model_id)}"
        return None  # s3://, file://, gs://: pyarrow's filesystems (workload.model.files) say whether they read it
    if hub_id_problem(model_id) is not None:
        return (f"not a Hugging Face Hub id (org/name: letters, digits, '-', '_' and '.'), nor a directory here; "
                f"{ALLOWED}{_repo_of_file(model_id)}")
    return None


def check_hub_reachable(repo_id: str, file_name: str = "tokenizer_config.json") -> None:
    """Before a library that retries for a minute reads `repo_id` from the Hub (transformers' AutoTokenizer): one
    request, raising Unreachable (no answer) or NeedsToken (gated); any other answer is left to that library. Nothing
    is asked when the file is in this machine's Hub cache, or HF_HUB_OFFLINE is set: then a file not in the cache is
    Unreachable, as the library would find it, in one line."""
    from huggingface_hub import try_to_load_from_cache

    if problem(repo_id) or is_path(repo_id) or "://" in repo_id:
        return
    cached = try_to_load_from_cache(repo_id, file_name)
    if isinstance(cached, str):
        return
    if (offline := offline_variable()) is not None:
        if cached is None:  # not known to be absent from the repo: simply not downloaded
            raise Unreachable(f"{repo_id}'s {file_name} is not in this machine's Hub cache and {offline} is set; "
                              "unset it to download, or download it first")
        return
    if os.environ.get("HF_HUB_OFFLINE") or offline_variable():
        return
    try:
        _get(repo_id, file_name, None)
    except ValueError:
        return


def hub_config_directory(model_id: str, token: str | None = None) -> str:
    """A temporary directory holding the Hub model's config.json, read with one request (see the module docstring).
    ValueError for a model that is not there, NeedsToken for a gated or private one, Unreachable for no answer. With
    HF_HUB_OFFLINE set, only the machine's Hub cache is read."""
    from huggingface_hub import hf_hub_download
    from huggingface_hub.errors import LocalEntryNotFoundError

    if (offline := offline_variable()) is not None:
        try:
            cached = hf_hub_download(model_id, CONFIG_FILE, local_files_only=True)
        except LocalEntryNotFoundError:
            raise Unreachable(f"{model_id} is not in this machine's Hub cache and {offline} is set") from None
        # A copy: the caller removes the directory it is given, and the cache's snapshot is the user's.
        directory = tempfile.mkdtemp(prefix="raytrain-model-config-")
        shutil.copyfile(cached, os.path.join(directory, CONFIG_FILE))
        return directory
    response = _get(model_id, CONFIG_FILE, token)
    if (why := config_size_problem(len(response.content))) is not None:
        raise ValueError(f"{model_id}'s {CONFIG_FILE} on the Hub {why}")
    try:
        json.loads(response.content)
    except ValueError:
        raise ValueError(f"{model_id}'s {CONFIG_FILE} on the Hub is not JSON") from None
    directory = tempfile.mkdtemp(prefix="raytrain-model-config-")
    with open(os.path.join(directory, CONFIG_FILE), "wb") as file:
        file.write(response.content)
    return directory


def config_size_problem(size: int) -> str | None:
    """Why a config.json of `size` bytes is refused before it is parsed (after 'is'), or None."""
    if size > MAX_CONFIG_BYTES:
        return f"is {size:,} bytes; a model's {CONFIG_FILE} is a few KiB (allowed: at most {MAX_CONFIG_BYTES:,})"
    return None


def _request(model_id: str, file_name: str, token: str | bool | None) -> tuple[str, dict, str]:
    from huggingface_hub import constants
    from huggingface_hub.utils import build_hf_headers

    endpoint = (os.environ.get("HF_ENDPOINT") or constants.ENDPOINT).rstrip("/")
    return endpoint, build_hf_headers(token=token), f"{endpoint}/{model_id}/resolve/main/{file_name}"


def get_file(model_id: str, file_name: str, token: str | bool | None):
    """One GET of a file of a Hub model, no retries (HF_ENDPOINT read now): the response, huggingface_hub's own error
    for an answer that is not the file (hf_raise_for_status: GatedRepoError, RepositoryNotFoundError,
    EntryNotFoundError, HfHubHTTPError), Unreachable for no answer. `token`: a token, None for HF_TOKEN from the
    environment, False for none."""
    from huggingface_hub.utils import get_session, hf_raise_for_status

    endpoint, headers, url = _request(model_id, file_name, token)
    try:
        response = get_session().get(url, headers=headers, timeout=HUB_TIMEOUT_S, follow_redirects=True)
    except Exception as error:  # noqa: BLE001 - httpx's (or httpx2's) transport errors: no answer at all
        raise Unreachable(f"the Hugging Face Hub at {endpoint} is not reachable ({type(error).__name__})") from None
    hf_raise_for_status(response)
    return response


# The files read_file has read within `reads_once()`: (url, authorization) -> (the bound it was read with, its bytes or
# the exception the Hub's answer raised).
_READS: contextvars.ContextVar[dict | None] = contextvars.ContextVar("hub_reads", default=None)


@contextlib.contextmanager
def reads_once() -> Iterator[None]:
    """Within the block, read_file asks the Hub once a file (and token): a later read of it is answered from the first,
    its bytes or the same error, so that one check never asks again for a file another check read (the preview's
    chat template, tokenizer size and tokenizer files all read tokenizer_config.json)."""
    reset = _READS.set({})
    try:
        yield
    finally:
        _READS.reset(reset)


def read_file(model_id: str, file_name: str, token: str | bool | None, max_bytes: int) -> bytes:
    """_read_file's one bounded request, or, within reads_once(), the answer it already had for the file."""
    memo = _READS.get()
    if memo is None:
        return _read_file(model_id, file_name, token, max_bytes)
    _, headers, url = _request(model_id, file_name, token)
    key = (url, headers.get("authorization", ""))
    if key in memo:
        bound, answer = memo[key]
        if isinstance(answer, BaseException):
            raise answer
        if bound >= max_bytes or len(answer) <= bound:  # read under a larger bound, or whole
            return answer[:max_bytes + 1]
    try:
        data = _read_file(model_id, file_name, token, max_bytes)
    except Exception as error:
        memo[key] = (max_bytes, error)
        raise
    memo[key] = (max_bytes, data)
    return data


def _read_file(model_id: str, file_name: str, token: str | bool | None, max_bytes: int) -> bytes:
    """get_file's one request, bounded: at most `max_bytes` + 1 bytes are read, so a file over the bound is known
    (its length over max_bytes) without reading it whole. It asks for `Range: bytes=0-max_bytes`, which the Hub and its
    CDN honour (huggingface_hub's resumed downloads rely on it, file_download.py http_get), and stops reading there
    when a server ignores the range and answers 200 with the whole file (the case http_get's comment names)."""
    from huggingface_hub.errors import HfHubHTTPError
    from huggingface_hub.utils import get_session, hf_raise_for_status

    endpoint, headers, url = _request(model_id, file_name, token)
    headers["Range"] = f"bytes=0-{max_bytes}"
    try:
        with get_session().stream("GET", url, headers=headers, timeout=HUB_TIMEOUT_S,
                                  follow_redirects=True) as response:
            if response.status_code >= 400:
                response.read()  # the Hub's error answers are a line of JSON, which hf_raise_for_status reads
                hf_raise_for_status(response)
            data = bytearray()
            for chunk in response.iter_bytes():
                data += chunk
                if len(data) > max_bytes:
                    break
    except HfHubHTTPError:
        raise  # an answer about the file
    except Exception as error:  # noqa: BLE001 - httpx's (or httpx2's) transport errors: no answer at all
        raise Unreachable(f"the Hugging Face Hub at {endpoint} is not reachable ({type(error).__name__})") from None
    return bytes(data[:max_bytes + 1])


def hub_files(model_id: str, token: str | bool | None) -> list[str] | None:
    """The file names of a Hub model repo, from one request and no retries: HfApi.model_info (GET
    {endpoint}/api/models/{repo_id}, hf_api.py), whose `siblings` are the repo's files (each an `rfilename`), the list
    list_repo_files would page through the repo's tree for; expand=["siblings"] asks for that field alone. None when
    the answer has no list. huggingface_hub's error for an answer that is not the listing (hf_raise_for_status),
    Unreachable for no answer. `token` as get_file's."""
    from huggingface_hub import HfApi
    from huggingface_hub.errors import HfHubHTTPError

    endpoint = _request(model_id, CONFIG_FILE, token)[0]
    try:
        info = HfApi(endpoint=endpoint).model_info(model_id, token=token, timeout=HUB_TIMEOUT_S, expand=["siblings"])
    except HfHubHTTPError:
        raise  # an answer about the repo
    except Exception as error:  # noqa: BLE001 - transport errors, or an answer that is no listing
        raise Unreachable(f"the Hugging Face Hub at {endpoint} did not list the repo ({type(error).__name__})") from None
    return None if info.siblings is None else [sibling.rfilename for sibling in info.siblings]


_PLAIN_NAME = re.compile(r"[\w./-]{1,200}", re.ASCII)


def weights_problem(file_names: list[str]) -> str | None:
    """Why a model repo holding `file_names` has no weights the job loads (the words after its id), or None: the job
    reads safetensors only (workload/model/weights.py), so a repo of pytorch_model.bin alone fails every rank once
    the model loads, after the GPUs started billing."""
    if SAFETENSORS_FILE in file_names or SAFETENSORS_INDEX in file_names:
        return None
    # A file name is the repo owner's text: only a plain one is quoted in the refusal.
    # Safetensors under a folder (original/model.safetensors) are not loaded either: from_pretrained looks at the
    # repo's root unless given subfolder= (transformers modeling_utils: "does not appear to have a file named").
    others = sorted(name for name in file_names if name.endswith((*OTHER_WEIGHTS, ".safetensors"))
                    and _PLAIN_NAME.fullmatch(name))
    held = f"its weights are {', '.join(others[:3])}{', ...' if len(others) > 3 else ''}" if others else "no weights"
    if any("/" in name and name.endswith(".safetensors") for name in others):
        held += ", under a folder, where from_pretrained does not look: it reads the repo's root"
    return (f"holds no {SAFETENSORS_FILE} or {SAFETENSORS_INDEX} ({held}), and the job loads safetensors weights only; "
            "allowed: a repo with safetensors weights (save_pretrained(safe_serialization=True) writes them), or "
            "s3://bucket/prefix/ holding such a model directory")


def _get(model_id: str, file_name: str, token: str | None):
    """get_file with the Hub's answers as this module's errors, in the job's words (--model_id)."""
    from huggingface_hub.errors import EntryNotFoundError, GatedRepoError, HfHubHTTPError, RepositoryNotFoundError
    from huggingface_hub.utils import build_hf_headers

    try:
        response = get_file(model_id, file_name, token or None)
    except GatedRepoError:
        raise NeedsToken(f"{model_id} is gated on the Hugging Face Hub: accept its terms on its Hub page, then set "
                         f"{TOKEN_VARIABLE} to a token of that account (on a stack: `{SECRET_COMMAND}`)") from None
    except RepositoryNotFoundError:
        hint = (f"or {TOKEN_VARIABLE} cannot see it" if build_hf_headers(token=token or None).get("authorization")
                else f"or private: then set {TOKEN_VARIABLE}, on a stack with `{SECRET_COMMAND}`")
        raise ValueError(f"{model_id} is not a model on the Hugging Face Hub ({hint}); check its spelling on "
                         f"huggingface.co; {ALLOWED}") from None
    except EntryNotFoundError:
        raise ValueError(f"{model_id} has no {file_name} on the Hub, so transformers cannot load it") from None
    except HfHubHTTPError as error:
        raise Unreachable(f"the Hugging Face Hub answered {error.response.status_code} for {model_id}") from None
    return response
