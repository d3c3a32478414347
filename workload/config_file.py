"""A run described in one file: `--config run.yaml` and `--print_config`, for every command whose flags are TrainConfig's.

The file is a YAML mapping whose keys are the flags' names without the dashes (`steps: 200`, `report_to: mlflow`), as
axolotl and torchtune describe a run; a flag given on the command line wins over the file's value, and the file's over
the command's default. A key that is no flag of the command is refused as argparse refuses an unknown flag: one line,
exit 2. `--print_config` prints the run's effective config, every field, as such a file and exits, so any run (a local
one, or a stack's with `python -m tools.job submit --print_config`) can be replayed with `--config` elsewhere.

Standard library and PyYAML only (the job's image and this project's requirements carry it): it answers before torch.
"""
from __future__ import annotations

import argparse
import dataclasses
import os
import re
import sys
from typing import Any, Iterable, Sequence

from workload import cli, user_files
from workload.cli import shown
from workload.config import aliases

CONFIG_FLAG = "--config"
PRINT_FLAG = "--print_config"
# What --config and --print_config add to a parser; never keys of the file itself.
OWN_DESTS = ("config", "print_config")
# A run's file is a few KiB (every flag of the job, with values, is under 4); the bound keeps a wrong path (a dataset, a
# checkpoint) from being read whole into memory and parsed by PyYAML's pure-Python parser.
MAX_CONFIG_BYTES = 256 * 1024
# A refusal quotes at most this many characters of a value: it may be a megabyte, or hold a token.
# A key shaped like a setting's name (a flag's, TRL's, axolotl's: `early_stopping_patience`, `use-rslora`): lowercase
# words of at most 20 characters joined by '_' or '-', quoted whole in a refusal; any other key (a token pasted as a
# key, a megabyte of text) only by its length.
_KEY_NAME = re.compile(r"[a-z][a-z0-9]{0,19}(?:[_.-][a-z0-9]{1,20}){0,8}")
# A shell's or docker compose's variable in a value (`storage_path: ${HOME}/runs`, `dataset: $DATA/chats.jsonl`): no
# one substitutes it in a --config file, and the run made a directory named `${HOME}` or a run named `${USER}-sft`.
# `${NAME}` (with any `:-default`) anywhere, `$NAME` where a path or a list item starts.
_VARIABLE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)[^}]*\}|(?:^|(?<=[/=:,\s]))\$([A-Za-z_][A-Za-z0-9_]*)")


def add_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(CONFIG_FLAG, metavar="RUN_YAML", default=None,
                        help="A YAML file of flag: value (names without the dashes); flags given here win over it.")
    parser.add_argument(PRINT_FLAG, action="store_true",
                        help="Print the run's effective config as a --config file and exit without running it.")


def parse(parser: argparse.ArgumentParser, argv: Sequence[str] | None) -> tuple[dict[str, Any], bool]:
    """`parser`'s flags, with --config's file under them: (every dest's value, whether --print_config was given)."""
    argv = sys.argv[1:] if argv is None else list(argv)
    check_one_name_each(argv, file_keys(parser))
    early = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
    early.add_argument(CONFIG_FLAG, default=None)
    known, _ = early.parse_known_args(argv)
    from_file = load(known.config, parser) if known.config else {}
    parser.set_defaults(**from_file)
    values = vars(parser.parse_args(argv))
    values.pop("config", None)
    on_line = command_line(argv)
    if "epochs" in values:
        _steps_or_epochs(values, on_line, from_file, known.config)
    return values, bool(values.pop("print_config", False))


def check_one_name_each(argv: Sequence[str], known: Iterable[str]) -> None:
    """A setting given twice on the command line under two names (`--max_steps 10 --steps 20`, `--batch-size` and
    `--batch_size`), or two --config files: argparse keeps the last silently, so it is refused naming both. (A flag
    over a --config file's key is the documented precedence, and one flag repeated is argparse's own.)"""
    known = set(known)
    seen: dict[str, str] = {}
    files: list[str] = []
    for position, arg in enumerate(argv):
        if arg == "--":
            break
        if not arg.startswith("--") or len(arg) == 2:
            continue
        name, equals, value = arg[2:].partition("=")
        if name == CONFIG_FLAG[2:]:
            files.append(value if equals else (argv[position + 1] if position + 1 < len(argv) else ""))
            continue
        plain = name.replace("-", "_")
        negated = plain.startswith("no_") and aliases.canonical(plain[3:], known) in known
        field = aliases.canonical(plain[3:] if negated else plain, known)
        if plain in aliases.SWITCH_ALIASES and plain not in known:  # axolotl's lora_target_linear sets lora_targets
            word = value if equals else (argv[position + 1] if position + 1 < len(argv) else "")
            field = next(iter(_switch_fields(plain, word if not word.startswith("-") else "")), field)
        if field not in known:
            continue  # argparse, or the aliases' refusals, answer it
        spelling = "--" + name.removeprefix("no-").removeprefix("no_") if negated else "--" + name
        if seen.setdefault(field, spelling) != spelling:
            raise cli.UsageError(f"{seen[field]} and {spelling} are two names of --{field}, given both; give one")
    if len(files) > 1:
        raise cli.UsageError(f"{CONFIG_FLAG} is given {len(files)} times ({', '.join(shown(path) for path in files)}); "
                             "give one file, and other settings as flags over it")


def _switch_fields(name: str, value: Any) -> list[str]:
    """The fields one of their switches sets with `value` (`lora_target_linear true`: lora_targets; false: none)."""
    if isinstance(value, str):  # a command line's word after the switch; none is true
        value = {"": True, "true": True, "yes": True, "1": True, "false": False, "no": False, "0": False}.get(
            value.lower(), value)
    try:
        return list(aliases.switch_values(name, value))
    except ValueError:
        return []  # a word that is no true or false: the switch's own refusal names it


def _steps_or_epochs(values: dict[str, Any], on_line: set[str], from_file: dict[str, Any], path: str | None) -> None:
    """--steps and --epochs are two ways to say how long to train: both on one level is refused; a flag's wins over
    the file's other one."""
    if {"steps", "epochs"} <= on_line:
        raise cli.UsageError("--steps and --epochs are two ways to say how long to train: give one")
    if "epochs" in on_line and not values["epochs"]:
        raise cli.UsageError("--epochs 0 is no pass over the data: give --epochs above 0, or --steps")
    if from_file.get("epochs") and "steps" in from_file:
        raise cli.UsageError(f"{CONFIG_FLAG} {path}: steps and epochs are two ways to say how long to train: keep one")
    if "steps" in on_line and "epochs" not in on_line:
        values["epochs"] = 0.0


def command_line(argv: Sequence[str]) -> set[str]:
    """The fields set by flags on the command line (--name, --name=value, --no-name, their names: --max_steps)."""
    names = set()
    for arg in argv:
        if arg == "--":
            break
        if arg.startswith("--"):
            name = arg[2:].split("=", 1)[0].replace("-", "_")
            names.add(aliases.ours(name.removeprefix("no_") if name.startswith("no_") else name))
    return names


def given(argv: Sequence[str]) -> set[str]:
    """The fields the user set: flags on the command line and keys of its --config file (which parse() has already
    read and checked)."""
    names = command_line(argv)
    early = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
    early.add_argument(CONFIG_FLAG, default=None)
    known, _ = early.parse_known_args(argv)
    if known.config:
        document = read_document(known.config)
        names |= ({aliases.ours(str(key).replace("-", "_")) for key in document}
                  if isinstance(document, dict) else set())
    return names


def file_keys(parser: argparse.ArgumentParser) -> dict[str, argparse.Action]:
    """The keys a --config file may set for `parser`: its flags' dests (but --help, --config and --print_config)."""
    return {action.dest: action for action in parser._actions
            if action.option_strings and action.dest not in ("help", *OWN_DESTS)}


def read_document(path: str, named: str | None = None, max_bytes: int = MAX_CONFIG_BYTES) -> Any:
    """The file's YAML document: at most `max_bytes`, without aliases (`*name`), whose expansion makes a small
    file a billion values (the "billion laughs"), and without a key given twice; a refusal is a UsageError naming the
    file as `named` (by default `--config PATH`), never its text."""
    import yaml

    named = named or f"{CONFIG_FLAG} {path}"

    class NoAliasLoader(yaml.SafeLoader):
        def compose_node(self, parent: Any, index: Any) -> Any:
            if self.check_event(yaml.AliasEvent):
                mark = self.peek_event().start_mark
                raise yaml.composer.ComposerError(None, None, "an alias", mark)
            return super().compose_node(parent, index)

        def construct_mapping(self, node: Any, deep: bool = False) -> Any:
            # PyYAML keeps a repeated key's last value silently; a run's file with `steps: 5` and `steps: 50` is a
            # mistake to name, not a choice to make for the user.
            seen: dict[Any, int] = {}
            for key_node, _ in node.value:
                key = key_node.value if isinstance(key_node, yaml.ScalarNode) else None
                if key is None:
                    continue
                if key in seen:
                    raise _Duplicate(key, seen[key], key_node.start_mark.line + 1)
                seen[key] = key_node.start_mark.line + 1
            return super().construct_mapping(node, deep=deep)

    try:  # a regular file within its bound (workload/user_files.py): a FIFO would wait for a writer forever
        text = user_files.read_bytes(os.path.expanduser(path), max_bytes)
    except OSError as error:
        raise cli.UsageError(f"{named}: {error.strerror}") from None
    except user_files.Refused as error:
        raise cli.UsageError(f"{named} {error.why}") from None
    try:
        if not text.startswith((b"\xff\xfe", b"\xfe\xff")):  # UTF-16/32 with their BOM PyYAML reads too
            text.decode("utf-8")
    except UnicodeDecodeError as error:  # PyYAML reads UTF-8 (or 16/32 with a BOM): a Windows editor's cp1252
        line = text[:error.start].count(b"\n") + 1
        raise cli.UsageError(f"{named}: not UTF-8 text (byte 0x{text[error.start]:02x} on line {line}); "
                             "save it as UTF-8") from None
    try:
        return yaml.load(text, Loader=NoAliasLoader)  # noqa: S506 - SafeLoader's subclass: no Python objects
    except _Duplicate as duplicate:
        key = duplicate.key if _quotable_key(duplicate.key) else "a key"
        raise cli.UsageError(f"{named}: {key} is given twice (lines {duplicate.first} and "
                             f"{duplicate.again}); keep one") from None
    except RecursionError:  # PyYAML's scanner and composer recurse once per nesting level
        raise cli.UsageError(f"{named}: nested too deeply; a run's file of flags is one mapping of "
                             "values") from None
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        where = f" (line {mark.line + 1})" if mark is not None else ""
        if getattr(error, "problem", None) == "an alias":
            raise cli.UsageError(f"{named}: YAML aliases (*name) are not allowed{where}; write each value "
                                 "out") from None
        if "'\\t'" in str(getattr(error, "problem", "")):  # PyYAML's scanner: "found character '\t' that ..."
            raise cli.UsageError(f"{named}: not YAML{where}: a tab character, and YAML forbids tabs "
                                 "for indentation; indent with spaces") from None
        raise cli.UsageError(f"{named}: not YAML{where}") from None


class _Duplicate(Exception):
    """A mapping's key given twice in a --config file: its text, and the lines of both."""

    def __init__(self, key: str, first: int, again: int) -> None:
        super().__init__(key)
        self.key, self.first, self.again = str(key), first, again


def _quotable_key(key: str) -> bool:
    """Whether a refusal may name `key` as written: shaped like a setting's name (_KEY_NAME) and like no token."""
    from workload.config.fields import looks_like_token

    return (len(key) <= cli.SHOWN_CHARS and key == repr(key)[1:-1] and not looks_like_token(key)
            and (bool(_KEY_NAME.fullmatch(key)) or not cli.TOKEN_LIKE.search(key)))


def load(path: str, parser: argparse.ArgumentParser) -> dict[str, Any]:
    """The file's values, each as its flag would parse it; an unknown key or a wrong type is a UsageError naming it."""
    document = read_document(path)
    if document is None:
        return {}
    if not isinstance(document, dict):
        raise cli.UsageError(f"{CONFIG_FLAG} {path}: a mapping of flag: value, got a {type(document).__name__}")
    actions = file_keys(parser)
    # Their switches (axolotl's lora_target_linear: true) as our values, as on the command line.
    switched: dict[Any, Any] = {}
    for key, value in document.items():
        if str(key) in aliases.SWITCH_ALIASES and str(key) not in actions:
            try:
                switched.update(aliases.switch_values(str(key), value))
            except ValueError as error:
                raise cli.UsageError(f"{CONFIG_FLAG} {path}: {error}") from None
        else:
            switched[key] = value
    # Their names (axolotl's base_model, lora_r, sequence_len) as ours, as on the command line (workload/config/aliases.py);
    # two keys of one setting (micro_batch_size and batch_size) are refused as a key given twice is.
    spelled: dict[str, str] = {}
    for key in document:
        ours = aliases.canonical(str(key), actions)
        if str(key) in aliases.SWITCH_ALIASES and str(key) not in actions:  # lora_target_linear: lora_targets
            ours = next(iter(_switch_fields(str(key), document[key])), ours)
        if spelled.setdefault(ours, str(key)) != str(key):
            raise cli.UsageError(f"{CONFIG_FLAG} {path}: {spelled[ours]} and {key} are two names of {ours}, given "
                                 "both; keep one")
    document = {aliases.canonical(str(key), actions): value for key, value in switched.items()}
    for key in document:
        if key in OWN_DESTS:
            raise cli.UsageError(f"{CONFIG_FLAG} {path}: {key} is a command-line flag, not a {CONFIG_FLAG} key: give "
                                 f"--{key} on the command line")
    _refuse_unknown(path, parser, document, actions)
    for key in aliases.LIST_FLAGS:  # axolotl writes lora_target_modules as a YAML list
        if isinstance(document.get(key), list) and all(isinstance(item, str) for item in document[key]):
            document[key] = ",".join(document[key])
    values = {key: _value(path, key, value, actions[key]) for key, value in document.items()}
    model_id = actions.get("model_id")
    if model_id and values.get("model_config") and values.get("model_id", model_id.default) != model_id.default:
        # A --print_config file of a local run holds `model_config: tiny`; editing its model_id alone would train the
        # random tiny model anyway (model_config wins), silently.
        raise cli.UsageError(f"{CONFIG_FLAG} {path}: model_config {shown(values['model_config'])} builds a random-weight "
                             f"model, so model_id {shown(values['model_id'])} would not be trained: remove model_config "
                             "to train it")
    return values


def _refuse_unknown(path: str, parser: argparse.ArgumentParser, document: dict[Any, Any],
                    actions: dict[str, argparse.Action]) -> None:
    """Every key that is not one of `actions`, at once (an axolotl file holds several): those whose meaning differs
    from ours with ours (aliases.DIFFERENT), the others as argparse names an unknown flag, each with its nearest."""
    keys = [key for key in document if key not in actions]
    refused = [refusal.removeprefix("--") for key in keys if (refusal := aliases.different(str(key).replace("-", "_")))]
    unknown = [str(key) for key in keys if not aliases.different(str(key).replace("-", "_"))]
    if not keys:
        return
    named = [key if _quotable_key(key) else shown(key) for key in unknown]
    more = f" and {len(named) - 10} more" if len(named) > 10 else ""
    # argparse's own words for an unknown flag, so both refusals read (and are grepped for) alike.
    message = "; ".join([*refused, *([f"unrecognized keys: {', '.join(named[:10])}{more}"] if named else [])])
    guesses = [(name, guess) for key, name in zip(unknown[:10], named) if (guess := aliases.nearest(key, actions))]
    if len(guesses) == 1 and len(named) == 1:
        said = f" (did you mean --{guesses[0][1]}?)"
    else:
        said = "".join(f"; {name}: did you mean --{guess}?" for name, guess in guesses)
    hint = f"`{parser.prog} --help` lists every flag{said}; a key is a flag without its dashes" if named else ""
    raise cli.UsageError(f"{CONFIG_FLAG} {path}: {message}", hint=hint)


def _value(path: str, key: str, value: Any, action: argparse.Action) -> Any:
    if isinstance(action, (argparse.BooleanOptionalAction, argparse._StoreTrueAction)):
        if value is None and action.default is None:
            return None
        if not isinstance(value, bool):
            raise cli.UsageError(f"{CONFIG_FLAG} {path}: {key} must be true or false, got {shown(value)}")
        return value
    if value is None:
        if action.default is None:
            return None
        raise cli.UsageError(f"{CONFIG_FLAG} {path}: {key} has no value")
    if isinstance(value, (dict, list, bool)):
        raise cli.UsageError(f"{CONFIG_FLAG} {path}: {key} must be a single value as its flag takes, got {shown(value)}")
    if isinstance(value, str) and (variable := _VARIABLE.search(value)):
        name = variable[1] or variable[2]
        raise cli.UsageError(f"{CONFIG_FLAG} {path}: {key} holds ${name}, which is not expanded: a {CONFIG_FLAG} file "
                             f"is read as written; write the value out, or give --{key} on the command line (the "
                             "shell expands it there)")
    try:
        return action.type(str(value)) if action.type else str(value)
    except (TypeError, ValueError):
        raise cli.UsageError(f"{CONFIG_FLAG} {path}: {key}: invalid {action.type.__name__} value: "
                             f"{shown(str(value))}") from None


def render(config: Any, **extra: Any) -> str:
    """A dataclass config (and the command's own settings in `extra`) as a --config file: every field, in order."""
    import yaml

    values = {**dataclasses.asdict(config), **extra}
    if values.get("epochs"):  # the steps are worked out from the epochs: a file holding both would be refused
        values.pop("steps")
    return yaml.safe_dump(values, sort_keys=False, default_flow_style=False)
