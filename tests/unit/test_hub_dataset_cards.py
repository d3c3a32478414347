"""Which README configs load_dataset can load without a config name, and whose data_files match the repo's files:
workload.data.hub_splits.unnamed_configs and unmatched_patterns held against this venv's datasets itself (each card
written to a directory and loaded with datasets.load_dataset, offline), and the local run's refusal naming
--dataset_config through hub_dataset.check_dataset (the fake Hub in tests/support/fake_hub.py)."""
from __future__ import annotations

import json
import re
from types import SimpleNamespace

import pytest

from tests.support.fake_hub import FakeHub
from workload.data import hub_card, hub_dataset, hub_formats, hub_splits, validate

LINES = "".join(json.dumps({"text": f"words {i}"}) + "\n" for i in range(8))


def _card(*configs: str) -> str:
    return "---\nconfigs:\n" + "".join(configs) + "---\n# a card\n"


# (card, files, verdict): "ok", "unnamed" (a config name is needed), or "unmatched" (data_files match nothing)
CARDS = {
    "three-none-default": (_card("- config_name: de\n  data_files: de/*.jsonl\n",
                                 "- config_name: it\n  data_files: it/*.jsonl\n",
                                 "- config_name: nl\n  data_files: nl/*.jsonl\n"),
                           ["de/a.jsonl", "it/a.jsonl", "nl/a.jsonl"], "unnamed"),
    "two-one-default": (_card("- config_name: de\n  data_files: de/*.jsonl\n",
                              "- config_name: it\n  default: true\n  data_files: it/*.jsonl\n"),
                        ["de/a.jsonl", "it/a.jsonl"], "ok"),
    "one-config": (_card("- config_name: only\n  data_files: part/*.jsonl\n"), ["part/a.jsonl"], "ok"),
    "glob-matches-nothing": (_card("- config_name: default\n  data_files:\n  - split: train\n"
                                   "    path: parts/train-*.jsonl\n"), ["corpus.jsonl"], "unmatched"),
    "recursive-glob-matches": (_card("- config_name: default\n  data_files:\n  - split: train\n"
                                     "    path: \"nested/**/*.jsonl\"\n"), ["nested/x/y/a.jsonl"], "ok"),
    "a-named-file-missing": (_card("- config_name: default\n  data_files: text/all.jsonl\n"), ["text/some.jsonl"],
                             "unmatched"),
    # datasets' DataFilesList.from_patterns: a path (no glob character) naming no file raises even beside one that
    # matches; a glob matching nothing beside one that matches is skipped.
    "a-named-file-missing-beside-a-match": (_card("- config_name: default\n  data_files:\n  - split: train\n"
                                                  "    path: [text/some.jsonl, text/gone.jsonl]\n"),
                                            ["text/some.jsonl"], "unmatched"),
    "a-glob-missing-beside-a-match": (_card("- config_name: default\n  data_files:\n  - split: train\n"
                                            "    path: [text/*.jsonl, extra/*.jsonl]\n"), ["text/some.jsonl"], "ok"),
    "an-alias-for-the-patterns": (_card("- config_name: first\n  default: true\n  data_files: &shared text/*.jsonl\n",
                                        "- config_name: second\n  data_files: *shared\n"), ["text/some.jsonl"], "ok"),
    # "card": load_dataset fails on the card itself (workload.data.hub_card): huggingface_hub's RepoCard and
    # datasets' MetadataConfigs, whatever the files
    "a-tab-before-a-list-item": ("---\nlicense: cc-by-4.0\ntags:\n\t- legal\n---\n", ["corpus.jsonl"], "card"),
    "a-header-that-is-a-list": ("---\n- legal\n- english\n---\n", ["corpus.jsonl"], "card"),
    "a-header-key-that-is-a-number": ("---\n2024: release\n---\n", ["corpus.jsonl"], "card"),
    "configs-a-mapping": ("---\nconfigs:\n  config_name: only\n  data_files: corpus.jsonl\n---\n", ["corpus.jsonl"],
                          "card"),
    "a-config-without-a-name": (_card("- data_files: corpus.jsonl\n"), ["corpus.jsonl"], "card"),
    "configs-a-list-of-lists": (_card("- [corpus.jsonl, more.jsonl]\n"), ["corpus.jsonl"], "card"),
    "data-files-a-mapping": (_card("- config_name: only\n  data_files:\n    train: corpus.jsonl\n"), ["corpus.jsonl"],
                             "card"),
    "a-split-name-with-a-dash": (_card("- config_name: only\n  data_files:\n  - split: held-out\n"
                                       "    path: corpus.jsonl\n"), ["corpus.jsonl"], "card"),
    # datasets/utils/metadata.py get_default_config_name: the name "default" and `default: true` are both defaults
    "a-config-named-default-and-one-marked": (_card("- config_name: default\n  data_files: a/*.jsonl\n",
                                                    "- config_name: big\n  default: true\n  data_files: b/*.jsonl\n",
                                                    "- config_name: small\n  data_files: a/*.jsonl\n"),
                                              ["a/x.jsonl", "b/x.jsonl"], "card"),
    "configs-empty": ("---\nconfigs: []\n---\n", ["corpus.jsonl"], "ok"),
    # "formats": the first config's splits (load.py infers the builder from them alone) of different formats
    "a-config-whose-splits-differ-in-format": (_card("- config_name: default\n  data_files:\n  - split: train\n"
                                                     "    path: corpus.jsonl\n  - split: test\n    path: held.csv\n"),
                                               ["corpus.jsonl", "held.csv"], "formats"),
    "a-second-config-of-another-format": (_card("- config_name: default\n  data_files: corpus.jsonl\n",
                                                "- config_name: tables\n  data_files: held.csv\n"),
                                          ["corpus.jsonl", "held.csv"], "ok"),
    "a-first-config-with-a-data-dir-infers-from-the-whole-repo": (
        _card("- config_name: en\n  data_dir: en\n"), ["en/train.jsonl", "fr/test.csv"], "formats"),
    "a-header-never-closed": ("---\nlicense: mit\n# no closing line\n", ["corpus.jsonl"], "ok"),
}
# what load_dataset raises for a card it cannot use (huggingface_hub/repocard.py, datasets/utils/metadata.py)
CARD_ERRORS = ("repo card metadata block should be a dict", "keywords must be strings", "Expected configs to be a list",
               "Each config must include", "Expected data_files in YAML", "several default configs")


def _verdict(files: list[str], readme: str) -> str:
    if hub_card.parse(readme).fault:
        return "card"
    if hub_formats.mixed(files, readme):
        return "formats"
    if hub_splits.unnamed_configs(files, readme):
        return "unnamed"
    return "unmatched" if hub_splits.unmatched_patterns(files, readme, "", ["train"]) else "ok"


@pytest.mark.parametrize("name", CARDS)
def test_the_verdict_is_what_datasets_does_with_the_card(name, tmp_path, monkeypatch):
    datasets = pytest.importorskip("datasets")
    yaml = pytest.importorskip("yaml")
    readme, files, verdict = CARDS[name]
    for file in files:
        (tmp_path / "repo" / file).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "repo" / file).write_text(LINES)
    (tmp_path / "repo" / "README.md").write_text(readme)
    monkeypatch.setenv("HF_DATASETS_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    try:
        datasets.load_dataset(str(tmp_path / "repo"), split="train")
        loaded = "ok"
    except (yaml.YAMLError, TypeError):
        loaded = "card"
    except ValueError as error:  # DataFilesNotFoundError and FileNotFoundError's kin included
        loaded = ("formats" if "Couldn't infer the same data file format" in str(error) else
                  "unnamed" if "Config name is missing" in str(error) else
                  "card" if any(words in str(error) for words in CARD_ERRORS) else "unmatched")
    except FileNotFoundError:
        loaded = "unmatched"
    assert loaded == verdict, f"{name}: datasets gives {loaded}, the test expects {verdict}: update CARDS"
    assert _verdict(files, readme) == verdict, f"{name}: the check says {_verdict(files, readme)}, datasets {loaded}"


@pytest.fixture
def hub(monkeypatch):
    with FakeHub(repos={}) as server:
        for name, (readme, files, _) in CARDS.items():
            server.datasets[f"lab/{name}"] = {"files": {"README.md": readme.encode(),
                                                        **{file: LINES.encode() for file in files}}}
        monkeypatch.setenv("HF_ENDPOINT", server.url)
        monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
        yield server


def _cfg(dataset: str, config: str = "") -> SimpleNamespace:
    return SimpleNamespace(dataset=dataset, dataset_split="train", dataset_config=config, eval_split="",
                           data_format="text", text_field="text", messages_field="messages", prompt_field="prompt",
                           completion_field="completion")


def test_the_local_run_refuses_an_empty_dataset_config_naming_the_flag_and_the_configs(hub):
    with pytest.raises(validate.DataError) as refused:
        hub_dataset.check_dataset(_cfg("lab/three-none-default"), say=pytest.fail)
    message = str(refused.value)
    assert message.startswith("--dataset_config lab/three-none-default: empty, and the repo declares 3 configs"), message
    assert message.endswith("allowed: one of de, it, nl") and "\n" not in message, message
    assert hub_dataset.check_dataset(_cfg("lab/three-none-default", "it"), say=pytest.fail) is not None


def test_the_local_run_refuses_data_files_that_match_nothing_naming_the_dataset(hub):
    with pytest.raises(validate.DataError, match=r"^--dataset lab/a-named-file-missing: the README's config "
                                                 r"'default' names files for split 'train' \(text/all.jsonl\)"):
        hub_dataset.check_dataset(_cfg("lab/a-named-file-missing"), say=pytest.fail)
    with pytest.raises(validate.DataError, match=r"^--dataset_config lab/glob-matches-nothing: the README's config "
                                                 r"'default'"):
        hub_dataset.check_dataset(_cfg("lab/glob-matches-nothing", "default"), say=pytest.fail)


PATTERNS = ["shards/part-*.parquet", "**/*.jsonl", "deep/**/*.csv", "*.json", "held/*", "held/**", "v?/x.jsonl",
            "[xy]/z.jsonl", "[!x]/z.jsonl", "exact/name.jsonl", "**"]
PATHS = ["shards/part-3.parquet", "shards/sub/part-3.parquet", "a.jsonl", "p/a.jsonl", "p/q/a.jsonl", "deep/b.csv",
         "deep/e/f/b.csv", "c.json", "held/a", "held/sub/a", "v1/x.jsonl", "v12/x.jsonl", "x/z.jsonl", "w/z.jsonl",
         "exact/name.jsonl", "exact/name.jsonl.gz"]


def test_a_data_files_pattern_matches_what_fsspecs_glob_matches():
    # datasets/data_files.py resolve_pattern globs with fsspec (its glob_translate, as Python's glob)
    glob_translate = pytest.importorskip("fsspec.utils").__dict__.get("glob_translate")
    if glob_translate is None:
        pytest.skip("fsspec without glob_translate (before 2023.12)")
    differ = [(pattern, path) for pattern in PATTERNS for path in PATHS
              if bool(hub_splits._glob(pattern).fullmatch(path)) != bool(re.fullmatch(glob_translate(pattern), path))]
    assert differ == [], f"(pattern, path) where the check and fsspec disagree: {differ}"


def test_a_card_is_parsed_once_for_all_of_a_checks_questions(monkeypatch):
    """config_names, unnamed_configs, unmatched_patterns and splits_of each read the README's configs: one parse of
    a card serves them all (a card of a few hundred configs is a megabyte of YAML)."""
    yaml = pytest.importorskip("yaml")
    parses = []
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

    class Counted(loader):
        def __init__(self, stream):
            parses.append(1)
            super().__init__(stream)

    monkeypatch.setattr(yaml, "CSafeLoader" if hasattr(yaml, "CSafeLoader") else "SafeLoader", Counted)
    readme = _card("- config_name: parsed-once\n  data_files: once/*.jsonl\n")
    files = ["once/a.jsonl"]
    assert hub_splits.config_names(readme) == ["parsed-once"]
    assert hub_splits.unnamed_configs(files, readme) is None
    assert hub_splits.unmatched_patterns(files, readme, "", ["train"]) is None
    assert hub_splits.splits_of(files, readme) == ["train"]
    assert len(parses) == 1


def test_globs_past_the_matching_budget_are_left_to_the_job_and_paths_are_still_judged():
    """A split of more globs than can be matched against the repo's files within the budget is not judged (None, the
    job's own look decides); its paths (no glob character) are looked up, whatever their number."""
    files = [f"shards/part-{i:05d}.jsonl" for i in range(2_000)]
    globs = [f"missing/{i}-*.jsonl" for i in range(hub_splits.MAX_GLOB_MATCHES // len(files) + 1)]
    assert hub_splits.unmatched_patterns(
        files, _card("- config_name: default\n  data_files: [" + ", ".join(globs) + "]\n"), "", ["train"]) is None
    assert hub_splits.unmatched_patterns(
        files, _card("- config_name: default\n  data_files: [" + ", ".join(globs[:3]) + "]\n"), "", ["train"]
    ) == ("default", "train", globs[0])
    paths = files + ["shards/part-99999.jsonl"]
    assert hub_splits.unmatched_patterns(
        files, _card("- config_name: default\n  data_files: [" + ", ".join(paths) + "]\n"), "", ["train"]
    ) == ("default", "train", "shards/part-99999.jsonl")


def test_a_cards_configs_are_bounded_by_what_their_aliases_expand_to_not_by_aliases():
    """An alias is ordinary YAML (huggingface_hub's yaml_dump writes shared objects as aliases): configs sharing one
    list of patterns pass while they expand to at most MAX_CONFIG_NODES values, and are refused past it, naming
    the bound; the count is memoised per node, so a deep bomb is counted at the cost of the nodes written."""
    patterns = "&patterns [" + ", ".join(f"shards/part-{i:04d}-*.jsonl" for i in range(2_000)) + "]"
    def card(configs: int) -> str:
        return _card(f"- config_name: c0\n  default: true\n  data_files: {patterns}\n",
                     *(f"- config_name: c{i}\n  data_files: *patterns\n" for i in range(1, configs)))
    fits = hub_card.parse(card(100))
    assert fits.fault is None and len(fits.metadata["configs"]) == 100
    assert fits.metadata["configs"][7]["data_files"] is fits.metadata["configs"][0]["data_files"]
    past = hub_card.parse(card(hub_card.MAX_CONFIG_NODES // 2_000 + 1))
    assert past.metadata is None and "expand to more than 1,000,000 values" in past.fault, past.fault
    yaml = pytest.importorskip("yaml")
    bomb = "a0: &a0 [q, q, q, q, q, q, q, q, q, q, q, q]\n" + "".join(
        f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 12) + "]\n" for i in range(1, 15)) + "top: *a14\n"
    node = yaml.compose(bomb, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader)).value[-1][1]
    assert hub_card.expanded_size(node, 10**9) == 10**9 + 1  # 12**15 nodes, counted from 15 lists
    assert hub_card.expanded_size(yaml.compose("a: &x [1, [2, *x]]", Loader=yaml.SafeLoader), 10**6) == 10**6 + 1


def test_the_local_run_refuses_a_card_datasets_cannot_use_naming_the_dataset(hub):
    hub.datasets["lab/a-line-in-a-config-name"] = {"files": {"corpus.jsonl": LINES.encode(), "README.md": _card(
        '- config_name: "one\\nforged line"\n  default: true\n', "- config_name: two\n  default: true\n").encode()}}
    with pytest.raises(validate.DataError) as refused:
        hub_dataset.check_dataset(_cfg("lab/a-line-in-a-config-name"), say=pytest.fail)
    assert "\n" not in str(refused.value) and 'configs "one\\nforged line" and two are both' in str(refused.value)
    with pytest.raises(validate.DataError) as refused:
        hub_dataset.check_dataset(_cfg("lab/a-config-named-default-and-one-marked", "small"), say=pytest.fail)
    message = str(refused.value)
    assert message.startswith("--dataset lab/a-config-named-default-and-one-marked: its README's configs default "
                              "and big are both the default"), message
    assert "allowed: " in message and "\n" not in message, message
    with pytest.raises(validate.DataError, match=r"^--dataset lab/a-tab-before-a-list-item: its README's YAML header "
                                                 r"does not parse \(ScannerError at line 4, column 1"):
        hub_dataset.check_dataset(_cfg("lab/a-tab-before-a-list-item"), say=pytest.fail)


SPLIT_PATHS = ["data/train-00000-of-00001.parquet", "train/a.jsonl", "my_train/x.jsonl", "a/b-train.x/c.jsonl",
               "trainer/x.jsonl", "x/train.jsonl", "x/pretrain.jsonl", "x/dev-1.jsonl", "val/x.csv", "test.jsonl",
               "x/y_validation_2.json", "data/eval-x/a.parquet", "x.jsonl", "foo/bar-test", "a/test/b/train.jsonl",
               "deep/er/testing/x.parquet", "custom-7/a.jsonl", "x/holdout.custom.jsonl", "valid", "a/validation/"]


@pytest.mark.parametrize("split", ["train", "validation", "test", "custom"])
def test_the_split_tests_are_datasets_patterns_as_one_regex_a_path(split):
    """split_in_directory judges a path by its directory and split_in_name by its base name (a repo lists 200,000
    files): each must agree with the pattern searched over the whole path (datasets' data_files.py
    KEYWORDS_IN_DIR_NAME_BASE_PATTERNS and KEYWORDS_IN_FILENAME_BASE_PATTERNS, as hub_splits words them)."""
    words, other = hub_splits._words(split), hub_splits.NON_WORD
    in_directory = re.compile(rf"(^|/)(|[^/]*{other})({words})({other}[^/]*)?/")
    in_name = re.compile(rf"(^|/)([^/]*{other})?({words})({other}[^/]*)?$")
    directory_test, name_test = hub_splits.split_in_directory(split), hub_splits.split_in_name(split)
    differ = [path for path in SPLIT_PATHS
              if bool(in_directory.search(path)) != directory_test(path) or bool(in_name.search(path)) != name_test(path)]
    assert differ == []
    assert any(map(directory_test, SPLIT_PATHS)) and any(map(name_test, SPLIT_PATHS))
