"""The splits a Hugging Face dataset repo without a loading script has, as `datasets` resolves them, so a
--dataset_split / --eval_split (trainDatasetSplit / trainEvalSplit) it lacks is refused before anything bills:
load_dataset raises "Unknown split" for it in the data stage, on the cluster.

datasets (data_files.py get_data_patterns, load.py's HubDatasetModuleFactory) takes the splits from, in order:
- the README's YAML `configs` (the dataset card's metadata): the chosen config's `data_files`, a list of
  {split, path} (those splits), or a path or list of paths (one split, train); a config with `data_dir` and no
  data_files takes the default patterns under that directory;
- else the default patterns: files named `data/{split}-NNNNN-of-NNNNN.*` (the Hub's parquet export; any split
  name), else directories named for train/validation/test (their keywords, SPLIT_KEYWORDS), else file
  names holding a keyword, else every data file as train. The first of these that finds a file decides.
A repo whose README cannot be read or parsed, or names configs none of which is chosen, is not judged here (None).
What load_dataset refuses of the README's configs themselves is: unnamed_configs (several, no default, and no config
name given) and unmatched_patterns (a config's data_files that match no file of the repo, as fsspec's glob matches).

A split value's base names are judged: train[:10%]+validation is train and validation. `split_files` picks a split's
files by the same patterns (workload.data.hub_dataset reads the first of them). Standard library at import (yaml
when a README is parsed, by workload.data.hub_card).
"""
from __future__ import annotations

import re

from workload.data import hub_card

README = "README.md"
MAX_README_BYTES = 1 << 20  # dataset cards are a few KiB to a few hundred; the YAML header comes first
# datasets/data_files.py SPLIT_PATTERN_SHARDED, under data/ (the Hub's parquet export).
SHARDED = re.compile(r"^data/(?P<split>\w+)-\d{5}-of-\d{5}[^/]*$")
DEFAULT_SPLITS = ("train", "validation", "test")
DATA_SUFFIXES = (".parquet", ".jsonl", ".json", ".csv", ".jsonl.gz", ".json.gz", ".csv.gz")
# datasets/splits.py and data_files.py (SPLIT_KEYWORDS): the names a split's files are recognised by.
SPLIT_KEYWORDS = {"train": ("train", "training"), "validation": ("validation", "valid", "dev", "val"),
                  "test": ("test", "testing", "eval", "evaluation")}
# datasets/data_files.py NON_WORDS_CHARS: what may stand either side of a keyword in a file or directory name.
NON_WORD = r"[-._ 0-9]"
_BASE = re.compile(r"\s*([\w.-]+)")


def base_names(value: str) -> list[str]:
    """The split names in datasets' split syntax (train[:5000]+validation -> train, validation)."""
    return [match[1] for part in value.split("+") if (match := _BASE.match(part))]


# a path part starting with "." or "_" (datasets' data_files.py skips hidden files and directories); one regex a
# path rather than a split and a generator: a repo lists 200,000 files
HIDDEN_PART = re.compile(r"(?:^|/)[._]")
_HIDDEN_ANYWHERE = re.compile(r"(?:^|/)[._]", re.MULTILINE)  # the same, over all paths joined by newlines


def data_files(files: list[str], config: str = "", suffixes: tuple | None = DATA_SUFFIXES) -> list[str]:
    """The data files among a repo's `files`, sorted; with `config`, those under its directory when there are any.
    `suffixes` None: every file datasets' patterns can match, whatever its suffix (not FILES_TO_IGNORE)."""
    if suffixes is None and not _HIDDEN_ANYWHERE.search(blob := "\n".join(files)) and not any(
            name in blob for name in FILES_TO_IGNORE):
        data = sorted(files)  # at C speed: a repo lists 200,000 files, and this is asked once a split
    else:
        data = sorted(f for f in files if not HIDDEN_PART.search(f) and (
            f.endswith(suffixes) if suffixes is not None else f.rpartition("/")[2] not in FILES_TO_IGNORE))
    if config:
        under = [f for f in data if f.split("/")[0] == config]
        data = under or data
    return data


def _words(split: str) -> str:
    return "|".join(re.escape(k) for k in SPLIT_KEYWORDS.get(split, (split,)))


def split_in_directory(split: str):
    """A test of a (lowered) file path: under a directory named for `split` (one of its keywords). The pattern's
    match ends at a '/', so it is judged on the file's directory alone, once a directory: a repo lists 200,000
    files in a few directories."""
    pattern, verdicts = re.compile(rf"(^|/)(|[^/]*{NON_WORD})({_words(split)})({NON_WORD}[^/]*)?/"), {}

    def test(path: str) -> bool:
        directory = path.rpartition("/")[0]
        if directory not in verdicts:
            verdicts[directory] = bool(directory) and pattern.search(directory + "/") is not None
        return verdicts[directory]
    return test


def split_in_name(split: str):
    """A test of a (lowered) file path: its name holds one of `split`'s keywords between non-word characters. The
    pattern, (^|/)...$ without '/' in between, is the whole base name: matched from its start only, after a
    substring test (a regex search from every position of 200,000 paths is seconds)."""
    words = SPLIT_KEYWORDS.get(split, (split,))
    pattern = re.compile(rf"([^/]*{NON_WORD})?({_words(split)})({NON_WORD}[^/]*)?")

    def test(path: str) -> bool:
        name = path.rpartition("/")[2]
        return any(word in name for word in words) and pattern.fullmatch(name) is not None
    return test


def split_files(files: list[str], split: str, config: str = "", suffixes: tuple | None = DATA_SUFFIXES) -> list[str]:
    """The data files of `split` among a dataset repo's `files` (see the module docstring), sorted."""
    data = data_files(files, config, suffixes)
    split = (base_names(split) or [split])[0]  # train[:5000] reads train's files
    lowered = [f.lower() for f in data]
    for pattern in (split_in_directory(split), split_in_name(split)):
        found = [f for f, low in zip(data, lowered) if pattern(low)]
        if found:
            return found
    any_keyword = re.compile(rf"(^|/|{NON_WORD})({'|'.join(w for ks in SPLIT_KEYWORDS.values() for w in ks)})"
                             rf"({NON_WORD}|/|$)")
    if split == "train" and not any(map(any_keyword.search, lowered)):
        return data  # datasets' DEFAULT_PATTERNS_ALL: a repo with no split names is all train
    return []


def default_splits(files: list[str], config: str = "", suffixes: tuple | None = DATA_SUFFIXES) -> list[str]:
    """The splits datasets' default patterns find among a repo's `files` (see the module docstring)."""
    data = data_files(files, config, suffixes)
    sharded = {match["split"] for f in data if (match := SHARDED.match(f))}
    if sharded:
        return [s for s in DEFAULT_SPLITS if s in sharded] + sorted(sharded - set(DEFAULT_SPLITS))
    lowered = [f.lower() for f in data]
    blob = "\n".join(lowered)  # a split whose keywords are in no path is out at C speed: a repo lists 200,000 files
    named = [split for split in DEFAULT_SPLITS if any(word in blob for word in SPLIT_KEYWORDS[split])]
    for pattern in (split_in_directory, split_in_name):
        found = [split for split in named if any(map(pattern(split), lowered))]
        if found:
            return found
    return ["train"] if data else []


def splits_of(files: list[str], readme: str | None, config: str = "") -> list[str] | None:
    """The repo's splits: the README's configs when it declares any (`readme`: its text, None without one), else the
    default patterns; None when not judged here (configs none of which is chosen, a form not read here)."""
    configs = _configs(readme) if readme else None
    if configs is None:
        return default_splits(files, config)
    chosen = ([c for c in configs if c.get("config_name") == config] if config else
              [c for c in configs if c.get("default") is True]
              or [c for c in configs if c.get("config_name") in (None, "default")]
              or (configs if len(configs) == 1 else []))
    if not chosen:
        return None
    entry = chosen[0]
    data_files = entry.get("data_files")
    if data_files is None and isinstance(entry.get("data_dir"), str):
        prefix = entry["data_dir"].strip("/") + "/"
        return default_splits([f[len(prefix):] for f in files if f.startswith(prefix)])
    if isinstance(data_files, str) or (isinstance(data_files, list) and data_files
                                       and all(isinstance(item, str) for item in data_files)):
        return ["train"]
    if isinstance(data_files, list) and data_files and all(
            isinstance(item, dict) and isinstance(item.get("split"), str) for item in data_files):
        return [item["split"] for item in data_files]
    if isinstance(data_files, dict) and data_files and all(isinstance(name, str) for name in data_files):
        return list(data_files)
    return None


def config_names(readme: str | None) -> list[str] | None:
    """The configs load_dataset accepts for a repo without a loading script, as datasets/load.py's
    HubDatasetModuleFactory builds them: the README's `configs` entries (create_builder_configs_from_metadata_configs,
    one a config_name), else the single "default" (its BUILDER_CONFIG_CLASS with the default patterns). Any other
    name is builder.py's `ValueError: BuilderConfig '<name>' not found. Available: [...]`, raised in the data stage.
    None when the README is there but not read here (not YAML): not judged."""
    if readme is None:
        return ["default"]
    configs = _configs(readme)
    if configs is None:
        return ["default"] if _metadata(readme) is not None else None
    return [str(entry.get("config_name", "default")) for entry in configs]


def _metadata(readme: str) -> dict | None:
    """The README's YAML header as a mapping ({} for none), or None when it is not judged here or load_dataset
    fails on it (workload.data.hub_card: parsed once per README, by libyaml; hub_card.parse(readme).fault says
    why, and the checks refuse that first)."""
    card = hub_card.parse(readme)
    return card.metadata if card.fault is None else None


def _configs(readme: str) -> list[dict] | None:
    """The README's YAML header's `configs` (a list of mappings), or None when it declares none or is not YAML."""
    metadata = _metadata(readme)
    configs = metadata.get("configs") if isinstance(metadata, dict) else None
    if not isinstance(configs, list) or not configs or not all(isinstance(entry, dict) for entry in configs):
        return None
    return configs


def missing(wanted: str, splits: list[str]) -> list[str]:
    """The base names of a split value that are not among `splits`."""
    return [name for name in base_names(wanted) if name not in splits]


# datasets/data_files.py FILES_TO_IGNORE: never a data file, unless a pattern names one of them itself.
FILES_TO_IGNORE = ("README.md", "config.json", "dataset_info.json", "dataset_infos.json", "dummy_data.zip",
                   "dataset_dict.json")
LEGACY_INFOS = "dataset_infos.json"  # datasets/config.py DATASETDICT_INFOS_FILENAME: its one entry is a default too


def unnamed_configs(files: list[str], readme: str | None) -> list[str] | None:
    """The README's config names when load_dataset without a config name raises builder.py's `ValueError: Config name
    is missing. Please pick one among the available configs: [...]`: two or more `configs` and no default, which
    utils/metadata.py MetadataConfigs.get_default_config_name finds as the only config, the one named "default" or
    the one with `default: true`, and load.py's HubDatasetModuleFactory as the one entry of the README's
    `dataset_info` or of a dataset_infos.json. None otherwise (one config, a default, a README not read here)."""
    configs = _configs(readme) if readme else None
    if configs is None or len(configs) < 2 or LEGACY_INFOS in files:
        return None
    if any(entry.get("config_name") == "default" or entry.get("default") for entry in configs):
        return None
    infos = (_metadata(readme) or {}).get("dataset_info")
    if isinstance(infos, dict) or (isinstance(infos, list) and len(infos) == 1):
        return None
    return [str(entry.get("config_name")) for entry in configs]


def unmatched_patterns(files: list[str], readme: str | None, config: str, splits: list[str]
                       ) -> tuple[str, str, str] | None:
    """(config, split, pattern) for a README config's data_files pattern that matches no file of the repo, where
    load_dataset fails on it: every split of the first config (load.py's HubDatasetModuleFactory resolves its
    data_files to infer the builder, and infer_module_for_data_files raises "No (supported) data files found" or
    "Couldn't infer the same data file format for all splits" for a split without files), and `splits` (base names)
    of the config chosen (`config`, else the default), which builder.py resolves before reading (data_files.py
    resolve_pattern: "Unable to find '<pattern>'"); and a config with a data_dir and no data_files whose directory holds
    nothing (create_builder_configs_from_metadata_configs raises EmptyDatasetError for any such config). A URL or
    absolute path is not judged; None when all match."""
    configs = _configs(readme) if readme else None
    if configs is None:
        return None
    for entry in configs:  # load.py create_builder_configs_from_metadata_configs: EmptyDatasetError, for any config
        directory = entry.get("data_dir")
        if entry.get("data_files") is None and isinstance(directory, str) and not any(
                f.startswith(directory.strip("/") + "/") for f in files):
            return str(entry.get("config_name", "default")), "train", directory.strip("/") + "/**"
    chosen = ([c for c in configs if c.get("config_name") == config] if config else
              [c for c in configs if c.get("config_name") == "default" or c.get("default")]
              or (configs if len(configs) == 1 else []))
    checks = [(configs[0], None)] + [(entry, set(splits)) for entry in chosen[:1]]
    listed = set(files)
    for entry, wanted in checks:
        base = entry.get("data_dir").strip("/") + "/" if isinstance(entry.get("data_dir"), str) else ""
        for split, patterns in _sanitized(entry.get("data_files")).items():
            if wanted is not None and split not in wanted:
                continue
            if (pattern := _unmatched(patterns, base, files, listed)) is not None:
                return str(entry.get("config_name", "default")), split, pattern
    return None


# datasets/utils/file_utils.py has_magic: what makes a data_files entry a glob rather than a path.
MAGIC = re.compile(r"[*?[]")
# Glob-against-file matches one split's check may make (a regex each, some microseconds): a card listing 50,000 globs
# against a repo of 10,000 files is left to the job rather than judged for minutes here.
MAX_GLOB_MATCHES = 2_000_000


def _unmatched(patterns: list[str], base: str, files: list[str], listed: set[str]) -> str | None:
    """The entry of one split's data_files that load_dataset fails on, or None: data_files.py DataFilesList.
    from_patterns raises FileNotFoundError for a path (no glob character) that names no file, and a split whose globs
    all match nothing has no files ("Unable to find" / "No (supported) data files found"). A URL or absolute path is
    not judged, nor is a split of so many globs that matching them would take longer than the job's own look."""
    judged = [p for p in patterns if "://" not in p and not p.startswith("/")]
    paths = [p for p in judged if not MAGIC.search(p)]
    if missing := next((p for p in paths if base + p.removeprefix("./") not in listed), None):
        return missing
    if not judged or len(judged) < len(patterns) or paths:
        return None
    globs = sorted(set(judged))
    if len(globs) * len(files) > MAX_GLOB_MATCHES:
        return None
    for pattern in globs:
        rx, name = _glob(base + pattern.removeprefix("./")), pattern.rsplit("/", 1)[-1]
        if any(rx.fullmatch(f) for f in files if f.rsplit("/", 1)[-1] not in FILES_TO_IGNORE
               or f.rsplit("/", 1)[-1] == name):
            return None
    return patterns[0]


def _sanitized(data_files) -> dict[str, list[str]]:
    """data_files.py sanitize_patterns: {split: [pattern, ...]}, a bare pattern or list being train's; {} for a form
    it would refuse (left to its own error)."""
    def listed(value):
        return [value] if isinstance(value, str) else value if isinstance(value, list) and all(
            isinstance(item, str) for item in value) else None
    if isinstance(data_files, dict):
        found = {str(split): listed(value) for split, value in data_files.items()}
    elif isinstance(data_files, list) and data_files and all(isinstance(item, dict) for item in data_files):
        found = {str(item.get("split")): listed(item.get("path")) for item in data_files}
    else:
        found = {"train": listed(data_files)} if data_files is not None else {}
    return {split: patterns for split, patterns in found.items() if patterns}


def _glob(pattern: str) -> re.Pattern:
    """fsspec's glob as resolve_pattern uses it (fsspec >= 2023.12, as Python's glob): '*' and '?' within one path
    part, '**' across parts ('**/' also none), [...] a class."""
    out, i = [], 0
    while i < len(pattern):
        if pattern.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
        elif pattern.startswith("**", i):
            out.append(".*")
            i += 2
        elif pattern[i] == "*":
            out.append("[^/]*")
            i += 1
        elif pattern[i] == "?":
            out.append("[^/]")
            i += 1
        elif pattern[i] == "[" and (close := pattern.find("]", i + 2)) != -1:
            inner = pattern[i + 1:close]
            out.append("[" + ("^" + inner[1:] if inner.startswith("!") else inner).replace("\\", "\\\\") + "]")
            i = close + 1
        else:
            out.append(re.escape(pattern[i]))
            i += 1
    return re.compile("".join(out))
