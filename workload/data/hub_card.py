"""A Hub dataset's README.md (its dataset card) as load_dataset reads it, and what in it load_dataset certainly fails
on, so the preview (trainDataset) and the local run (--dataset) refuse it before anything bills.

load_dataset reads the card with huggingface_hub's DatasetCard.load (datasets/load.py, HubDatasetModuleFactory and
LocalDatasetModuleFactory get_module), whose RepoCard.content setter (huggingface_hub/repocard.py) takes the YAML
block REGEX_YAML_BLOCK finds at the start of the text and parses it with yaml.safe_load: a YAML error is raised as it
is (ScannerError, ParserError...), a block that is not a mapping raises "repo card metadata block should be a dict",
and DatasetCardData(**data) raises TypeError "keywords must be strings" for a key that is not a string. A card
without the block has empty metadata. Then datasets/utils/metadata.py MetadataConfigs.from_dataset_card_data reads a
non-empty `configs`: not a list raises "Expected configs to be a list", an entry without `config_name` (any entry that
is not a mapping) "Each config must include `config_name` field", and a `data_files` of another form than a string,
a list of strings or of {split, path} mappings (_raise_if_data_files_field_not_valid) "Expected data_files in YAML to
be either a string or a list of strings or a list of dicts"; get_default_config_name, called whenever the card has
configs (load.py create_builder_configs_from_metadata_configs), raises "Dataset has several default configs" for two
configs that are each the only one, named "default" or `default: true`.

A YAML alias is one object where it is used (safe_load shares it; huggingface_hub's own yaml_dump writes shared
objects as aliases, so an alias alone is ordinary): what is bounded is the size the card's `configs` expand to, every
alias counted where it is used, since datasets walks each config's data_files as expanded (sanitize_patterns, one
pattern resolved at a time, and its errors print the configs whole): MAX_CONFIG_NODES. The count is memoised per YAML
node, so an alias bomb costs the nodes written, not the nodes it expands to. Parsed once per README (lru_cache) by
libyaml where PyYAML has it (a card of a few hundred configs is 1 MiB of YAML: 2 s for PyYAML's pure-Python parser,
0.2 s for libyaml's), as one node graph, constructed with the same safe constructors. Standard library at import.
"""
from __future__ import annotations

import functools
import json
import re
from dataclasses import dataclass

# huggingface_hub/repocard.py REGEX_YAML_BLOCK: the front matter, `---` lines around it, at the very start.
YAML_BLOCK = re.compile(r"^(\s*---(?:\r\n|\r|\n))([\S\s]*?)((?:\r\n|\r|\n)---[ \t]*(\r\n|\n|$))")
# The values a card's `configs` may expand to (each alias counted where used). A card of 300 configs, each a few
# splits of a few patterns, is some 10,000; one listing 1,000 shards for each of 300 configs 300,000.
MAX_CONFIG_NODES = 1_000_000
# datasets/utils/metadata.py _split_re: a split name in a {split, path} data_files entry.
SPLIT_NAME = re.compile(r"^\w+(\.\w+)*$")


@dataclass(frozen=True)
class Card:
    """The card's YAML metadata ({} without a block), or None when not judged here (a block cut off by the read, a
    nesting too deep for the parser); `fault`: what load_dataset certainly fails on, a phrase, or None."""

    metadata: dict | None
    fault: str | None = None


def shown(name: str) -> str:
    """A name from the repo (a config, a file, a column) as a refusal quotes it: as it is when printable, else as
    workload.data.shapes.show quotes a value (JSON-escaped: a newline cannot forge a line; by its length where it
    is shaped like a token)."""
    from workload.data.shapes import show

    name = str(name)[:100]
    return name if name.isprintable() and show(name) == json.dumps(name, ensure_ascii=False) else show(name)


@functools.lru_cache(maxsize=4)
def parse(readme: str) -> Card:
    """The card as load_dataset reads it (see the module docstring); callers only read what it holds."""
    import yaml

    match = YAML_BLOCK.search(readme)
    if match is None:  # no front matter: empty metadata, unless an opening `---` lost its end to the bounded read
        return Card(None if readme.lstrip().startswith("---") else {})
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)(match.group(2))
    try:
        node = loader.get_single_node()
        metadata = loader.construct_document(node) if node is not None else None
    except yaml.YAMLError as error:
        return _unparsed(yaml, match.group(2), error)
    except RecursionError:
        return Card(None)
    finally:
        loader.dispose()
    if metadata is None:
        return Card({})
    if not isinstance(metadata, dict):
        return Card(None, f"its README's YAML header is a {type(metadata).__name__}, not a mapping (huggingface_hub's "
                          "RepoCard: \"repo card metadata block should be a dict\")")
    if any(not isinstance(key, str) for key in metadata):
        return Card(None, "its README's YAML header has a key that is not a string (huggingface_hub's "
                          "DatasetCardData(**metadata): \"keywords must be strings\")")
    configs = next((value for key, value in reversed(node.value) if key.value == "configs"), None)  # the last wins
    if configs is not None and expanded_size(configs, MAX_CONFIG_NODES) > MAX_CONFIG_NODES:
        return Card(None, f"its README's `configs` expand to more than {MAX_CONFIG_NODES:,} values (YAML aliases "
                          "counted where used; datasets walks them expanded): a card is bounded input")
    return Card(metadata, configs_fault(metadata.get("configs")))


def _unparsed(yaml, block: str, error) -> Card:
    """A block libyaml refused, judged by the parser huggingface_hub uses (yaml.safe_load, PyYAML's own: the two
    differ at the edges), on this error path only; its error, by type and place (never the card's text)."""
    if getattr(yaml, "CSafeLoader", None) is not None:
        try:
            yaml.safe_load(block)
        except yaml.YAMLError as confirmed:
            error = confirmed
        except RecursionError:
            return Card(None)
        else:
            return Card(None)
    if isinstance(error, yaml.MarkedYAMLError):
        mark = error.problem_mark or error.context_mark
        where = f" at line {mark.line + 2}, column {mark.column + 1}" if mark else ""
    else:
        where = ""
    return Card(None, f"its README's YAML header does not parse ({type(error).__name__}{where}; huggingface_hub's "
                      "DatasetCard.load raises it from yaml.safe_load, inside load_dataset)")


def expanded_size(root, cap: int) -> int:
    """The YAML nodes under `root` with every alias expanded where used, counted to `cap` + 1 (a node that contains
    itself is past any cap): memoised per node, iterative (no recursion limit)."""
    sizes: dict[int, int] = {}
    on_path: set[int] = set()
    stack = [(root, False)]
    while stack:
        node, done = stack.pop()
        children = _children(node)
        if done:
            on_path.discard(id(node))
            sizes[id(node)] = min(cap + 1, 1 + sum(sizes[id(child)] for child in children))
            continue
        if id(node) in sizes:
            continue
        if id(node) in on_path:
            return cap + 1
        on_path.add(id(node))
        stack.append((node, True))
        for child in children:
            if id(child) in on_path:
                return cap + 1
            if id(child) not in sizes:
                stack.append((child, False))
    return sizes[id(root)]


def _children(node) -> list:
    if isinstance(node.value, list):
        return [part for item in node.value for part in (item if isinstance(item, tuple) else (item,))]
    return []


def configs_fault(configs) -> str | None:
    """What MetadataConfigs.from_dataset_card_data and get_default_config_name raise for the card's `configs`, as a
    phrase naming the config; None for configs they accept (empty ones are no configs: `if
    dataset_card_data.get("configs")`)."""
    if not configs:
        return None
    if not isinstance(configs, list):
        return (f"its README's `configs` is a {type(configs).__name__}, not a list of configs (datasets' "
                "MetadataConfigs: \"Expected configs to be a list\")")
    for index, entry in enumerate(configs):
        if not isinstance(entry, dict) or "config_name" not in entry:
            shape = "has no `config_name`" if isinstance(entry, dict) else f"is a {type(entry).__name__}"
            return (f"its README's configs entry {index + 1} {shape}, where each must be a mapping with a "
                    "config_name (datasets' MetadataConfigs: \"Each config must include `config_name`\")")
        if not isinstance(entry["config_name"], str):
            return (f"its README's configs entry {index + 1} has a config_name that is a "
                    f"{type(entry['config_name']).__name__}, not a string")
        if not _data_files_valid(entry.get("data_files")):
            return (f"its README's config {shown(entry['config_name'])} has data_files of a form datasets refuses "
                    "(\"Expected data_files in YAML to be either a string or a list of strings or a list of dicts "
                    "with two keys: 'split' and 'path'\", a split of word characters)")
    by_name = {entry["config_name"]: entry for entry in configs}  # datasets keeps the last of a repeated name
    defaults = [name for name, entry in by_name.items()
                if len(by_name) == 1 or name == "default" or entry.get("default")]
    if len(defaults) > 1:
        return (f"its README's configs {shown(defaults[0])} and {shown(defaults[1])} are both the default (named "
                "'default' or `default: true`): load_dataset raises \"Dataset has several default configs\" whatever "
                "config is asked for")
    return None


def _data_files_valid(data_files) -> bool:
    """datasets/utils/metadata.py MetadataConfigs._raise_if_data_files_field_not_valid, as a verdict."""
    if data_files is None or isinstance(data_files, str):
        return True
    if not isinstance(data_files, list):
        return False
    return all(isinstance(item, str) or (
        isinstance(item, dict) and len(item) == 2 and isinstance(item.get("split"), str)
        and SPLIT_NAME.match(item["split"]) is not None and isinstance(item.get("path"), (str, list)))
        for item in data_files)
