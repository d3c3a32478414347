"""A Hugging Face dataset id's records checked before anything loads a model: the split's first data file, read with
one bounded ranged GET and walked by workload.data.validate, as the preview (infra/preview/dataset_records.py, naming
trainDataset) and the job's driver (workload.run.preflight.validate, naming --dataset) both call it.

Hub API (huggingface_hub's hf_api.py): the repo's files from `GET {endpoint}/api/datasets/{id}` (HfApi.dataset_info,
its "siblings" list of {"rfilename"}, what HfApi.list_repo_files lists for a repo), and a file from
`GET {endpoint}/datasets/{id}/resolve/main/{path}` (huggingface_hub.hf_hub_url for repo_type="dataset") with
`Range: bytes=0-{limit-1}`. One request each, no retries (as workload.model.model_source.get_file); the Hub's
answers become huggingface_hub's errors (utils/_http.py hf_raise_for_status): RepositoryNotFoundError,
GatedRepoError, EntryNotFoundError, HfHubHTTPError.

The split's files, as the `datasets` library picks them without a loading script (datasets/data_files.py's default
patterns, in its order): files under a directory named for the split (`train/...`, `data/train-00000-of-00001.parquet`
is a file named for it), else files whose name holds the split's keyword between non-word characters
(`*train*.jsonl`), else, for the train split only, every data file. Keywords: datasets' SPLIT_KEYWORDS (train,
training; validation, valid, dev, val; test, testing, eval, evaluation). A trainDatasetConfig narrows to the files
under a directory of that name when there are any (the Hub's parquet layout `{config}/{split}/...`). Data files:
.parquet, .jsonl, .json, .csv and their .gz (what the validator reads); the first in sorted order is checked. Those
patterns live in workload.data.hub_splits, which also says which splits the repo has (the README's `configs` when it
declares any): a --dataset_split or --eval_split (trainDatasetSplit, trainEvalSplit) it lacks is refused with them
(check_splits), where datasets would raise "Unknown split" on the cluster, and a --dataset_config
(trainDatasetConfig) it lacks with the configs it has (hub_splits.config_names), where datasets would raise
"BuilderConfig '<name>' not found"; an empty one where the README's configs have no default (hub_splits.
unnamed_configs: "Config name is missing"), and a config whose data_files match no file (hub_splits.
unmatched_patterns) are refused too, as is a README load_dataset cannot use (hub_card.parse: its YAML, its
`configs`, two defaults, configs past a bound) and a train split whose later files have a column its first lacks
(check_columns, hub_columns: at most hub_columns.MAX_FILES ranged reads), a repo whose splits are files of different
formats (check_formats, hub_formats: "Couldn't infer the same data file format for all splits", from the file list
alone) and a card whose dataset_info features the first record contradicts (check_features, hub_features: from the
bytes already read). The records checked are still found by
the default patterns: a split whose files only a README config's own patterns name is refused for want of a file
(a known limit).

Standard library at import (huggingface_hub when called).
"""
from __future__ import annotations

import io
import os
from dataclasses import dataclass, field

from workload.data import hub_card, hub_columns, hub_features, hub_formats, hub_splits, shapes, validate
from workload.data.hub_splits import DATA_SUFFIXES, split_files  # noqa: F401 - this module's names too
from workload.model import model_source

# The bound on what is read of one file: as the preview's S3 read (infra/preview/dataset_records.PREVIEW_MAX_BYTES).
MAX_BYTES = 64 * 2**20


class NotReachable(Exception):
    """The Hub did not answer (no network, a 5xx): the environment, not the dataset."""


@dataclass(frozen=True)
class HubChecked:
    """What was checked: the repo file, the validator's result, and the bytes read of the file (its first records,
    which the preview renders with the chat template: infra/preview/template_records.py)."""

    file: str
    checked: validate.Checked
    size: int
    head: bytes = field(default=b"", repr=False)


def check_splits(dataset: str, files: list[str], token, config: str, wanted: list[tuple[str, str]],
                 where: str, config_subject: str = "") -> str | None:
    """The config (`config_subject` naming it) against the configs the repo has (hub_splits.config_names), then each
    (split value, subject) in `wanted` against the splits the repo has, or that config has (hub_splits.splits_of):
    DataError naming the subject and what the repo has. With a README (one bounded read), also an empty config where
    the README's configs need one named (hub_splits.unnamed_configs) and a config whose data_files match no file
    (hub_splits.unmatched_patterns: naming `config_subject` when the config is the one it names, else `where`). A
    repo without a README is judged by the default patterns alone, at no request when the splits are among them.
    Returns the README's text (None without one)."""
    wanted = [(split, subject) for split, subject in wanted if split]
    if hub_splits.README not in files and not config and not any(
            hub_splits.missing(split, hub_splits.default_splits(files, config)) for split, _ in wanted):
        return None
    readme = None
    if hub_splits.README in files:
        body, _ = _read(dataset, hub_splits.README, token, hub_splits.MAX_README_BYTES, where)
        readme = body.decode("utf-8", "replace")
        if fault := hub_card.parse(readme).fault:
            raise validate.DataError(f"{where}: {fault}; allowed: a card whose YAML datasets reads, its configs a list "
                                     "of mappings each with a config_name, one default at most "
                                     "(hf.co/docs/hub/datasets-manual-configuration)")
    if config and (names := hub_splits.config_names(readme)) is not None and config not in names:
        has = _listed(names)
        raise validate.DataError(
            f"{config_subject or where} {dataset}: no config '{config[:100]}' in the repo, whose configs are: {has} "
            "(as datasets builds them: the README's `configs` entries, else the single 'default'; load_dataset raises "
            "\"BuilderConfig not found\" for any other); allowed: one of those, or empty")
    if not config and (names := hub_splits.unnamed_configs(files, readme)):
        raise validate.DataError(
            f"{config_subject or where} {dataset}: empty, and the repo declares {len(names)} configs and no default "
            f"(the README's `configs`, none named 'default' or with `default: true`): load_dataset raises \"Config "
            f"name is missing\"; allowed: one of {_listed(names)}")
    bases = [name for split, _ in wanted for name in hub_splits.base_names(split)]
    if unmatched := hub_splits.unmatched_patterns(files, readme, config, bases):
        name, split, pattern = unmatched
        raise validate.DataError(
            (f"{config_subject} {dataset}" if config == name else where)
            + f": the README's config '{name[:100]}' names files for split '{split[:100]}' ({pattern[:100]}) that "
            "match none in the repo, and load_dataset fails on it (\"Unable to find\", \"No (supported) data files "
            f"found\"); allowed: a config whose data_files match the repo's files (its configs: "
            f"{_listed(hub_splits.config_names(readme) or [])})")
    splits = hub_splits.splits_of(files, readme, config)
    if splits is None:
        return readme
    for split, subject in wanted:
        if lacking := hub_splits.missing(split, splits):
            has = ", ".join(name[:100] for name in splits[:10]) or "none (no data files)"
            raise validate.DataError(
                f"{subject} {dataset}: no data file of split '{lacking[0][:100]}'"
                + (f" (config '{config}')" if config else "") + f" in the repo, whose splits are: {has} (as datasets "
                "finds them: the README's configs, else files named for a split: data/{split}-00000-of-00001.parquet, "
                "{split}.jsonl, {split}/...); allowed: one of those")
    return readme


def check_columns(dataset: str, chosen: list[str], split: str, config: str, readme: str | None,
                  body: bytes, size: int, token, where: str) -> None:
    """The split's later files (`chosen`) against its first (workload.data.hub_columns: a
    column the first lacks is datasets' DatasetGenerationCastError), where they are the files datasets reads and
    the first is the one whose columns it builds with: the default patterns (no README configs, no config but the
    default) and train, the split datasets builds first (its first table's columns are every split's). `body` of
    `size`: the first file's bytes, already read."""
    if len(chosen) < 2 or not hub_columns.judged(chosen[0]) or config not in ("", "default"):
        return
    if hub_splits.base_names(split)[:1] != ["train"]:
        return  # train is datasets' first split wherever it is one (data_files.py DEFAULT_SPLITS, sharded splits too)
    metadata = hub_splits._metadata(readme) if readme is not None else {}
    if metadata is None or hub_splits._configs(readme or "") is not None or "dataset_info" in metadata:
        return  # a card's dataset_info features are what datasets casts to (load.py's builder info)
    drift = hub_columns.drifted(chosen, body, size,
                                lambda name, start, length: _read(dataset, name, token, length, where, start))
    if drift:
        name, extra, columns = drift
        raise validate.DataError(
            f"{where}: the split's files disagree on columns: {hub_card.shown(name)} has "
            f"{', '.join(map(hub_card.shown, extra[:5]))}, which {hub_card.shown(chosen[0])} (its first, whose columns "
            f"datasets builds the split with: {', '.join(map(hub_card.shown, columns[:10]))}) lacks; load_dataset fails casting it to those (datasets' "
            "CastError \"column names don't match\", raised as DatasetGenerationError); allowed: files with the first "
            "file's columns or fewer")


def check_formats(files: list[str], readme: str | None, where: str) -> None:
    """Two splits of the repo whose files infer different builders (workload.data.hub_formats): load_dataset raises
    "Couldn't infer the same data file format for all splits" whatever split is asked for; DataError naming `where`."""
    if found := hub_formats.mixed(files, readme):
        (split, module, name), (other, other_module, other_name) = found
        raise validate.DataError(
            f"{where}: its splits are files of different formats: '{split[:100]}' is {module} "
            f"({hub_card.shown(name)}), '{other[:100]}' {other_module} ({hub_card.shown(other_name)}); load_dataset "
            "infers one builder for all splits and raises \"Couldn't infer the same data file format for all "
            "splits\", whatever split is asked for; allowed: every split's files in one format (.jsonl/.json, .csv, "
            ".parquet, .txt)")


def check_features(name: str, body: bytes, split: str, config: str, readme: str | None, where: str) -> None:
    """The card's declared features (its `dataset_info`, for `config`) against the first record of the train split's
    first file `name` (`body`: its bytes, already read), as datasets' json builder casts it (workload.data.
    hub_features); DataError naming `where` and the column. A card with `configs` is not judged (a known limit)."""
    if readme is None or hub_splits.base_names(split)[:1] != ["train"] or hub_splits._configs(readme) is not None:
        return  # with the card's configs, the file read (the default patterns') may not be the config's
    features = hub_features.declared(hub_splits._metadata(readme), config)
    record = hub_features.first_record(name, body) if features else None
    if record and (found := hub_features.contradiction(features, record)):
        column, why = found
        raise validate.DataError(
            f"{where}: the README's dataset_info features contradict the data: column {hub_card.shown(column)} of "
            f"{hub_card.shown(name)}'s first record {why}; load_dataset casts the files to the card's features and "
            "fails (DatasetGenerationError); allowed: a card whose features match the files (or none)")


def check_holds_data(files: list[str], where: str) -> None:
    """A repo with no data file at all (hub_splits.data_files: none of DATA_SUFFIXES) is the dataset's mistake, not a
    split's: DataError naming `where` (the dataset's setting). A loading script (*.py) is never run: datasets 4.0
    dropped them (datasets/load.py dataset_module_factory: "Dataset scripts are no longer supported, but found
    {filename}"; datasets 4.0.0 release notes), so a repo of a script alone has nothing load_dataset can read."""
    if hub_splits.data_files(files):
        return
    scripts = [name for name in files if name.endswith(".py")]
    said = (f"a loading script ({', '.join(name[:100] for name in scripts[:3])}), which datasets 4+ no longer "
            "runs (\"Dataset scripts are no longer supported\"), and no data files" if scripts else "no data files")
    raise validate.DataError(f"{where}: the repo holds {said}; allowed: a dataset repo with data files "
                             f"({', '.join(DATA_SUFFIXES)})")


def _listed(names: list[str]) -> str:
    """Config names as a refusal lists them: 20 at most, each cut at 100 characters."""
    return ", ".join(name[:100] for name in names[:20]) + (", ..." if len(names) > 20 else "")


def check_records(dataset: str, split: str, config: str, fields: shapes.Fields, *, subject: str,
          token: str | bool | None = None, limit: int = MAX_BYTES, eval_split: str = "",
          eval_subject: str = "", split_subject: str = "", config_subject: str = "") -> HubChecked:
    """The split's first data file checked (its first `limit` bytes when larger: the records in them). DataError
    naming `subject` for a dataset that is not there, a split it does not have (check_splits, with the splits it
    has), a bad record, and naming `eval_subject` for an `eval_split` it does not have; NotReachable when the Hub
    does not answer. `token`: a token, None for HF_TOKEN from the environment, False for none. `split_subject` and
    `config_subject` (default `subject`) name the split's and the config's settings in those refusals."""
    where = f"{subject} {dataset}"
    files = _files(dataset, token, where)
    check_holds_data(files, where)
    readme = check_splits(dataset, files, token, config, [(split, split_subject or subject),
                                                          (eval_split, eval_subject)], where, config_subject or subject)
    check_formats(files, readme, where)
    chosen = split_files(files, split, config)
    if not chosen:
        where = f"{split_subject or subject} {dataset}"
        shown = ", ".join(f for f in files if f.endswith(DATA_SUFFIXES))[:200] or "no data files"
        raise validate.DataError(f"{where}: no data file of split '{split}'"
                                 + (f" (config '{config}')" if config else "") + f" in the repo ({shown}); allowed: "
                                 f"files named for the split such as data/{split}-00000-of-00001.parquet or "
                                 f"{split}.jsonl, in {', '.join(DATA_SUFFIXES)}")
    name = chosen[0]
    body, size = _read(dataset, name, token, limit, where)
    checked = validate.check_file(f"{dataset}/{name}", fields, subject=subject, opener=lambda: io.BytesIO(body),
                                  complete=len(body) >= size)
    check_features(name, body, split, config, readme, where)
    check_columns(dataset, chosen, split, config, readme, body, size, token, where)
    return HubChecked(name, checked, size, body)


def _hub(path: str, token: str | bool | None, extra: dict | None = None):
    from huggingface_hub import constants
    from huggingface_hub.errors import HfHubHTTPError
    from huggingface_hub.utils import build_hf_headers, get_session, hf_raise_for_status

    endpoint = (os.environ.get("HF_ENDPOINT") or constants.ENDPOINT).rstrip("/")
    try:
        response = get_session().get(f"{endpoint}/{path}", headers={**build_hf_headers(token=token), **(extra or {})},
                                     timeout=model_source.HUB_TIMEOUT_S, follow_redirects=True)
    except Exception as error:  # noqa: BLE001 - the transport's errors: no answer at all
        raise NotReachable(f"the Hugging Face Hub at {endpoint} is not reachable ({type(error).__name__})") from None
    if response.status_code == 416:  # Range Not Satisfiable: the file is 0 bytes
        return response
    try:
        hf_raise_for_status(response)
    except HfHubHTTPError as error:
        status = error.response.status_code if error.response is not None else 0
        if type(error) is HfHubHTTPError and (status >= 500 or status == 429):
            raise NotReachable(f"the Hugging Face Hub answered {status}") from None
        raise
    return response


def _errors(dataset: str, token, where: str, call):
    from huggingface_hub.errors import EntryNotFoundError, GatedRepoError, HfHubHTTPError, RepositoryNotFoundError

    try:
        return call()
    except GatedRepoError:
        raise validate.DataError(
            f"{where} is gated on the Hugging Face Hub: accept its terms on its Hub page, then set "
            f"{model_source.TOKEN_VARIABLE} to a token of that account (on a stack: "
            f"`{model_source.SECRET_COMMAND}`)") from None
    except RepositoryNotFoundError:
        hint = (f"or {model_source.TOKEN_VARIABLE} cannot see it" if token else
                f"or private: then set {model_source.TOKEN_VARIABLE}, on a stack with `{model_source.SECRET_COMMAND}`")
        raise validate.DataError(f"{where} is not a dataset on the Hugging Face Hub ({hint}); allowed: a Hub "
                                 "dataset id (org/name), a .jsonl/.json/.csv/.parquet file, or s3://bucket/key") from None
    except EntryNotFoundError:
        raise validate.DataError(f"{where}: a file the repo lists is not there") from None
    except HfHubHTTPError as error:
        status = error.response.status_code if error.response is not None else "an error"
        raise validate.DataError(f"{where}: the Hub answered {status}") from None


def _siblings(dataset: str, token, where: str, blobs: bool = False) -> list[dict]:
    query = "?blobs=true" if blobs else ""
    response = _errors(dataset, token, where, lambda: _hub(f"api/datasets/{dataset}{query}", token))
    try:
        siblings = response.json().get("siblings") or []
        return [entry for entry in siblings if isinstance(entry["rfilename"], str)]
    except (ValueError, TypeError, KeyError, AttributeError):
        raise NotReachable("the Hub's answer listing the dataset's files is not JSON") from None


def _files(dataset: str, token, where: str) -> list[str]:
    return [entry["rfilename"] for entry in _siblings(dataset, token, where)]


def file_sizes(dataset: str, *, subject: str, token: str | bool | None = None) -> dict[str, int]:
    """The repo's files and their sizes in bytes, as HfApi.dataset_info(files_metadata=True) asks for them
    (`?blobs=true`: each sibling then carries its "size", and an LFS file its "lfs" {"size", "sha256",
    "pointerSize"}: hf_api.py RepoSibling and BlobLfsInfo; the LFS size is the file's, not its pointer's). A file
    listed without a size counts 0. DataError and NotReachable as check_records."""
    sizes = {}
    for entry in _siblings(dataset, token, f"{subject} {dataset}", blobs=True):
        lfs = entry.get("lfs") if isinstance(entry.get("lfs"), dict) else {}
        size = lfs.get("size", entry.get("size"))
        sizes[entry["rfilename"]] = size if isinstance(size, int) else 0
    return sizes


def _read(dataset: str, name: str, token, limit: int, where: str, start: int = 0) -> tuple[bytes, int]:
    """(the file's `limit` bytes from `start`, its size): one ranged GET; a server that ignores Range is read to the
    bound only."""
    response = _errors(dataset, token, where, lambda: _hub(f"datasets/{dataset}/resolve/main/{name}", token,
                                                           {"Range": f"bytes={start}-{start + limit - 1}"}))
    if response.status_code == 416:  # a range of a 0-byte file, or past the end
        return b"", 0
    body = response.content[start:start + limit] if response.status_code == 200 else response.content[:limit]
    total = response.headers.get("Content-Range", "").rpartition("/")[2]
    size = int(total) if total.isdigit() else len(response.content)
    return body, size


def check_dataset(cfg, say=print) -> HubChecked | None:
    """The job's driver's check of a Hub --dataset (workload.run.preflight.validate), before the model loads: DataError
    naming --dataset for a bad one; a Hub that does not answer is NotReachable (exit 3 in the caller), unless this
    machine's cache holds the dataset: then it is said in one line and left to the workers' own read. Nothing is asked
    with HF_HUB_OFFLINE set: a dataset this machine's cache lacks is NotReachable then, as the model's config and the
    tokenizer are (workload.model.model_source.check_hub_reachable). HF_TOKEN from the environment."""
    from workload.config import is_file_dataset

    if not cfg.dataset or is_file_dataset(cfg.dataset):
        return None
    if (offline := model_source.offline_variable(model_source.DATASETS_OFFLINE_VARIABLES)) is not None:
        if not in_cache(cfg.dataset):
            raise NotReachable(f"not in this machine's cache and {offline} is set; unset it to download, or "
                               "download it first")
        return None
    try:
        return check_records(cfg.dataset, cfg.dataset_split, cfg.dataset_config, shapes.Fields.of(cfg),
                             subject="--dataset", eval_split=cfg.eval_split, eval_subject="--eval_split",
                             split_subject="--dataset_split", config_subject="--dataset_config")
    except NotReachable as error:
        if not in_cache(cfg.dataset):
            raise
        say(f"--dataset {cfg.dataset}: not checked before loading the model: {error}; this machine's cache holds it")
        return None


def in_cache(dataset: str) -> bool:
    """Whether this machine's caches hold `dataset`: datasets' own (HF_DATASETS_CACHE, else HF_HOME/datasets; a Hub
    dataset org/name under org___name) or the Hub's (HF_HUB_CACHE, else HF_HOME/hub; datasets--org--name). With the
    Hub unreachable, datasets' load_dataset falls back to that cache (datasets/load.py dataset_module_factory's
    CachedDatasetModuleFactory), so the run can still read it; without one, it fails after its retries."""
    home = os.path.expanduser(os.environ.get("HF_HOME") or os.path.join("~", ".cache", "huggingface"))
    datasets_cache = os.path.expanduser(os.environ.get("HF_DATASETS_CACHE") or os.path.join(home, "datasets"))
    hub_cache = os.path.expanduser(os.environ.get("HF_HUB_CACHE") or os.path.join(home, "hub"))
    return (os.path.isdir(os.path.join(datasets_cache, dataset.replace("/", "___")))
            or os.path.isdir(os.path.join(hub_cache, "datasets--" + dataset.replace("/", "--"))))
