"""A Hub dataset repo whose splits are files of different formats (train.jsonl beside test.csv), found before anything
bills: load_dataset infers one builder for the whole repo from every split's files and raises "Couldn't infer the
same data file format for all splits" when two splits infer different ones, whatever split is asked for (datasets/
load.py HubDatasetModuleFactory and LocalDatasetModuleFactory get_module -> infer_module_for_data_files).

The splits it infers from (load.py get_module): the README's first config's data_files when that config has them,
else the default patterns over the whole repo (data_files.py get_data_patterns; workload.data.hub_splits). A split's
builder (infer_module_for_data_files_list): its files' suffixes counted (train.jsonl.gz counts .jsonl and .gz), the
most common one datasets knows (packaged_modules/__init__.py _EXTENSION_TO_MODULE) wins, ties to .parquet, .lance,
.vortex, .arrow, .jsonl, .json, .csv, then the greater suffix, a metadata file (metadata.jsonl, ...) last. The builder
is compared with its arguments: .tsv is ("csv", {"sep": "\\t"}), not .csv's ("csv", {}).

Judged only where certain: a suffix outside EXTENSION_TO_MODULE and INERT (an image's, a .zip archive's) that could
rank first leaves the split unjudged, as does a repo with a .eval, task.toml or instruction.md file (datasets 5's
logs and harbor default patterns come first); a repo of more than MAX_FILES files with two builders' suffixes is
not judged either (a bound on the preview's time). Standard library at import.
"""
from __future__ import annotations

import re
from collections import Counter

from workload.data import hub_splits

# datasets 5.2 packaged_modules/__init__.py _EXTENSION_TO_MODULE, its table and text formats (the folder builders'
# image, audio, video, pdf ... suffixes are left out: they make a split unjudged, below).
EXTENSION_TO_MODULE: dict[str, tuple[str, tuple]] = {
    ".csv": ("csv", ()), ".tsv": ("csv", (("sep", "\t"),)), ".json": ("json", ()), ".jsonl": ("json", ()),
    ".ndjson": ("json", ()), ".parquet": ("parquet", ()), ".geoparquet": ("parquet", ()), ".gpq": ("parquet", ()),
    ".arrow": ("arrow", ()), ".txt": ("text", ()), ".conll": ("conll", ()),
    ".conllu": ("conll", (("comment_prefix", "#"),)), ".tar": ("webdataset", ()), ".xml": ("xml", ()),
    ".hdf5": ("hdf5", ()), ".h5": ("hdf5", ()), ".lance": ("lance", ()), ".vortex": ("vortex", ()),
}
# Suffixes datasets counts but maps to no builder (compression): skipped in the ranking, as datasets skips them.
INERT = (".gz", ".bz2", ".xz", ".zst", ".lz4")
# data_files.py's tie order after the count (sort_key), and packaged_modules' _ALL_METADATA_FILENAMES (ranked last).
FAVOURED = (".parquet", ".lance", ".vortex", ".arrow", ".jsonl", ".json", ".csv")
METADATA_NAMES = ("instruction.md", "latest_version_hint.json", "metadata.csv", "metadata.jsonl", "metadata.parquet",
                  "task.toml")
# The files a repo of several builders' suffixes may list for its splits to be resolved here (datasets' patterns over
# each split, some microseconds a file): past it, left to the job.
MAX_FILES = 50_000


def module_of(names: list[str]) -> tuple[str, tuple] | None:
    """The builder datasets infers for one split's files `names`, or None when not certain (see the docstring)."""
    counts = Counter((f".{suffix.lower()}", base in METADATA_NAMES) for name in names
                     for base in [name.rpartition("/")[2]] for suffix in base.split(".")[1:])

    def rank(item):
        (suffix, metadata), count = item
        return (not metadata, count, *(suffix == s for s in FAVOURED), suffix)
    for (suffix, _), _ in sorted(counts.items(), key=rank, reverse=True):
        if suffix in EXTENSION_TO_MODULE:
            return EXTENSION_TO_MODULE[suffix]
        if suffix not in INERT:
            return None
    return None


def _candidates(files: list[str]) -> list[str]:
    """The files datasets' patterns can match (resolve_pattern): not hidden, not one of FILES_TO_IGNORE."""
    return hub_splits.data_files(files, suffixes=None)


def split_files(files: list[str], readme: str | None) -> dict[str, list[str]] | None:
    """{split: its files} as load.py infers the builder from them, or None when not judged here. A file datasets
    drops for its suffix (allowed_extensions) is kept: module_of leaves a split unjudged where that suffix ranks
    first."""
    candidates = _candidates(files)
    # every dotted part of every path (a directory's too: more, never fewer), at C speed over the joined paths
    suffixes = set(re.findall(r"\.[^./\n]+", "\n".join(candidates).lower()))
    if len({EXTENSION_TO_MODULE[suffix] for suffix in suffixes & EXTENSION_TO_MODULE.keys()}) < 2:
        return None  # one builder's suffixes at most (a repo of 200,000 parquet shards): no two splits can differ
    if len(candidates) > MAX_FILES:
        return None
    if any(f.endswith(".eval") or f.rpartition("/")[2] in ("task.toml", "instruction.md") for f in candidates):
        return None
    configs = hub_splits._configs(readme) if readme else None
    if configs and "data_files" in configs[0]:
        patterns = hub_splits._sanitized(configs[0]["data_files"])
        if not patterns or any("://" in p or p.startswith("/") for ps in patterns.values() for p in ps):
            return None
        if sum(map(len, patterns.values())) * len(candidates) > hub_splits.MAX_GLOB_MATCHES:
            return None
        globs = {split: [hub_splits._glob(p.removeprefix("./")) for p in ps] for split, ps in patterns.items()}
        return {split: [f for f in candidates if any(rx.fullmatch(f) for rx in rxs)] for split, rxs in globs.items()}
    return {split: hub_splits.split_files(candidates, split, suffixes=None)
            for split in hub_splits.default_splits(candidates, suffixes=None)}


def mixed(files: list[str], readme: str | None) -> tuple[tuple[str, str, str], tuple[str, str, str]] | None:
    """Two splits whose files infer different builders, each as (split, builder, a file of it), or None."""
    splits = split_files(files, readme)
    if not splits:
        return None
    seen: tuple[str, tuple, str] | None = None
    for split, names in splits.items():
        module = module_of(names) if names else None
        if module is None:
            continue
        if seen is None:
            seen = (split, module, names[0])
        elif module != seen[1]:
            return ((seen[0], _said(seen[1]), seen[2]), (split, _said(module), names[0]))
    return None


def _said(module: tuple[str, tuple]) -> str:
    name, arguments = module
    return name + "".join(f" ({key}={value!r})" for key, value in arguments)
