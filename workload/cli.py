"""What every command of the project shares: its exit codes, its --help layout, and how it answers a user error.

The commands: `python -m workload.local`, `workload.train`, `workload.transport` (the workload's), and
`tools.capacity`, `tools.status`, `tools.job` (the operator's). Each builds its parser with `parser()`, which
prints the defaults and the exit codes below in --help, and runs its `main` through `run()`, which turns the
errors a user can cause into one or two lines on stderr and a distinct exit code, never a traceback:

    0    success
    1    a check ran and said no (a transport not as expected, no AZ qualifies, a job that failed)
    2    bad usage or input (a flag, a file, a value): fix the command
    3    the environment: no credentials, no kubeconfig, an API or cluster that cannot be reached
    130  interrupted (Ctrl-C, SIGTERM)

Standard library only, and nothing heavy is imported here: this module travels to the cluster inside the
workload package, and --help must answer before torch, Ray or boto3 would have loaded.
"""
from __future__ import annotations

import argparse
import os
import re
import signal
import sys
from typing import Callable, Sequence

OK = 0
CHECK_FAILED = 1
USAGE = 2  # also what argparse exits with on a flag it cannot parse
ENVIRONMENT = 3
INTERRUPTED = 130
# What a command treats as Ctrl-C: `kill`, a container stopping, the terminal it ran in closing.
STOPPING_SIGNALS = (signal.SIGTERM, signal.SIGHUP)


class CommandError(Exception):
    """A failure the user can act on: `run` prints the message (and the hint on a second line), no traceback."""

    exit_code = CHECK_FAILED

    def __init__(self, message: str, hint: str = "") -> None:
        super().__init__(message)
        self.hint = hint


class UsageError(CommandError):
    """Bad flags or input. Plain ValueErrors, the project's way of refusing a bad value, count as this too."""

    exit_code = USAGE


class EnvironmentProblem(CommandError):
    """Missing credentials or kubeconfig, an unreachable API server or job server."""

    exit_code = ENVIRONMENT


class CheckFailed(CommandError):
    """The command ran and its check said no."""

    exit_code = CHECK_FAILED


def exit_codes_help(check_failed: str) -> str:
    """The epilog of every --help: the exit codes, with what "a check failed" means for this command."""
    return ("exit status:\n"
            "  0    success\n"
            f"  1    {check_failed}\n"
            "  2    bad usage or input (a flag, a file, a value)\n"
            "  3    the environment: no credentials, no kubeconfig, an API or server that cannot be reached\n"
            "  130  interrupted")


class _HelpFormatter(argparse.RawDescriptionHelpFormatter, argparse.ArgumentDefaultsHelpFormatter):
    """Descriptions as written (they hold examples), and each option's default after its help, unless it has none
    worth printing (a required flag's None, a switch's False)."""

    def _get_help_string(self, action: argparse.Action) -> str:
        # `is`, not `in (None, False)`: 0 == False, and a zero default (--num_workers 0: one per GPU) is worth printing.
        if action.default is None or action.default is False or action.required:
            return action.help or ""
        if action.default == "":
            return (action.help or "") + " (default: empty)"
        return super()._get_help_string(action)

    def _split_lines(self, text: str, width: int) -> list[str]:
        # argparse's own, except that a flag value such as prompt-completion is never cut at its hyphen.
        import textwrap

        return textwrap.wrap(self._whitespace_matcher.sub(" ", text).strip(), width, break_on_hyphens=False)


# What an error may quote of a value the user gave: SHOWN_CHARS at most, and nothing that looks like a token (a run of
# 20 or more letters and digits, as every API token is, or a URI's user:password@).
SHOWN_CHARS = 80
TOKEN_LIKE = re.compile(r"[A-Za-z0-9_-]{20,}")
_CREDENTIALS = re.compile(r"://[^/\s]*@")


def shown(value: object) -> str:
    """`value` as a refusal may quote it: a short value, whole (repr); one that may be a token (a URI with credentials,
    a run of 20 or more letters and digits, as every API token is), or longer than SHOWN_CHARS, only by its length."""
    from workload.config.uri_credentials import has_credentials

    text = repr(value)
    if len(text) > SHOWN_CHARS or _CREDENTIALS.search(text) or has_credentials(text) or TOKEN_LIKE.search(text):
        return f"a value of {len(str(value)):,} characters (not shown: it may be long, or a token)"
    return text


# What a refusal echoes of one argument, and of the whole line: argparse repeats an unknown flag whole (a flag of a
# megabyte gave a megabyte of stderr), and a "did you mean" may carry the word too.
ARGUMENT_SHOWN_CHARS = 100
MESSAGE_SHOWN_CHARS = 2000


def _clipped(text: str) -> str:
    """`text` with each word past ARGUMENT_SHOWN_CHARS cut there, and the whole past MESSAGE_SHOWN_CHARS, each cut
    saying how long it was: what every command's argparse error echoes of the user's arguments."""
    text = " ".join(word if len(word) <= ARGUMENT_SHOWN_CHARS else
                    f"{word[:ARGUMENT_SHOWN_CHARS]}... ({len(word):,} characters)" for word in text.split(" "))
    return text if len(text) <= MESSAGE_SHOWN_CHARS else f"{text[:MESSAGE_SHOWN_CHARS]}... ({len(text):,} characters)"


def _bounded(message: str) -> str:
    """argparse's message with each value it quotes ('...'), and each long or token-like word of an unrecognized
    argument, as `shown` gives it: argparse repeats a value whole (`invalid int value: '999...'`). A refused choice
    is quoted as every choice key's and flag's refusal quotes it (workload/config/fields.py shown_choice)."""
    from workload.config.fields import shown_choice  # on the error path only: the package is not light

    message = re.sub(r"invalid choice: ('[^']*'|\"[^\"]*\")",
                     lambda refused: f"invalid choice: {shown_choice(refused.group(1)[1:-1])}", message)
    message = re.sub(r"'([^']*)'", lambda quoted: shown(quoted.group(1)), message)
    return " ".join(_bounded_word(word) for word in message.split(" "))


def _bounded_word(word: str) -> str:
    """One word of argparse's message: a flag's name as written, its `=value` (`--token=hf_...`) and any other word
    as `shown` gives it."""
    if word.startswith("--"):
        name, equals, value = word.partition("=")
        return name + (f"={shown(value)}" if equals and shown(value) != repr(value) else equals + value)
    return word if shown(word) == repr(word) else shown(word)


class _Parser(argparse.ArgumentParser):
    """No abbreviations (argparse would take `--lora_r` as `--lora_rank`, silently), a hook that rewrites argv
    before parsing (workload.config's aliases: `--max_steps` as `--steps`), and "did you mean" for an unknown flag."""

    rewrite: Callable[[list[str]], list[str]] | None = None
    suggest: Callable[[str], str | None] | None = None
    """A name (no dashes) -> the flag it is nearest to (no dashes), or None; unset: the nearest of this parser's."""

    def __init__(self, *args, **kwargs) -> None:
        kwargs["allow_abbrev"] = False
        super().__init__(*args, **kwargs)

    def parse_known_args(self, args=None, namespace=None):
        if self.rewrite is not None:
            args = self.rewrite(list(sys.argv[1:] if args is None else args))
        return super().parse_known_args(args, namespace)

    def error(self, message: str):
        """A flag argparse cannot parse: its message and where to look, not the whole usage block."""
        hint = f"`{self.prog} --help` lists every flag"
        if (guess := self._nearest_flag(message)) is not None and f"--{guess}" in message.split()[2:]:
            # the very flag, of another of its commands (`tools.job logs --run-id`: submit's): argparse refused it here
            hint = f"--{guess} is not a flag of this command; `{self.prog} COMMAND --help` lists each command's"
        elif guess is not None:
            hint += f" (did you mean --{guess}?)"
        elif (guess := _nearest_choice(message)) is not None:
            hint += f" (did you mean {guess}?)"
        elif (percent := re.search(r"^argument (--\w+): invalid float value: '(\d+(?:\.\d+)?)\s*%'$", message)):
            hint = f"did you mean {percent[1]} {float(percent[2]) / 100:g}? it takes a fraction, not a percentage"
        elif (whole := _whole_number(message)) is not None:
            hint = f"did you mean {whole}? it takes a whole number, written out"
        elif (guess := self._positional_file(message)) is not None:
            flag, what = ("--config", "settings") if guess.lower().endswith((".yaml", ".yml")) else ("--dataset", "data")
            hint = f"did you mean {flag} {guess}? {self.prog} takes its {what} file as a flag"
        elif (guess := self._bare_word_hint(message)) is not None:
            hint = guess
        elif (commands := self._commands(message)) is not None:
            hint = f"commands: {', '.join(commands)}; `{self.prog} COMMAND --help` tells what each takes"
        _fail(USAGE, _clipped(_bounded(message)), _clipped(hint))
        sys.exit(USAGE)

    def _nearest_flag(self, message: str) -> str | None:
        if not message.startswith("unrecognized arguments: "):
            return None
        unknown = [word for word in message.split()[2:] if word.startswith("--")]
        short = [word for word in message.split()[2:] if len(word) == 2 and word[0] == "-" and word[1].isalpha()]
        if not unknown and short:  # `-f` for --follow, as tail and kubectl take it: the one flag of that letter
            starting = [flag for flag in self._flags() if flag.startswith(short[0][1])]
            return starting[0] if len(starting) == 1 else None
        if not unknown:
            return None
        name = unknown[0][2:].partition("=")[0]
        if len(name) > ARGUMENT_SHOWN_CHARS:  # no flag is named so: nothing to compare a megabyte with
            return None
        guess = self.suggest(name) if self.suggest is not None else self._nearest_own(name)
        words = message.split()[2:]
        after = words.index(unknown[0]) + 1
        value = unknown[0].partition("=")[2] or (words[after] if after < len(words) else "")
        if guess is None and value and f"--{value}" in self._option_string_actions:
            return value  # kubectl's `--output json`: no flag near --output, and json is this parser's --json
        return guess

    def _flags(self) -> list[str]:
        """This parser's flags and its subcommands' (`tools.job logs --folow`), without dashes: argparse hands a
        subcommand's unknown flag back to the parser above it."""
        parsers = [self, *(sub for action in self._actions if isinstance(action, argparse._SubParsersAction)
                           for sub in action.choices.values())]
        return sorted({option[2:] for each in parsers for option in each._option_string_actions
                       if option.startswith("--")})

    def _nearest_own(self, name: str) -> str | None:
        import difflib

        flags = self._flags()
        match = difflib.get_close_matches(name, flags, n=1) or difflib.get_close_matches(name.replace("-", "_"), flags,
                                                                                         n=1)
        # The start of exactly one flag's name (--print): suggested, never taken (argparse's abbreviations are off).
        starting = [flag for flag in flags if flag.startswith(name.replace("-", "_")) or flag.startswith(name)]
        return match[0] if match else (starting[0] if len(starting) == 1 else None)


    def _commands(self, message: str) -> list[str] | None:
        """The commands of a parser given none (`python -m tools.job`), or None."""
        if not message.startswith("the following arguments are required"):
            return None
        for action in self._actions:
            if isinstance(action, argparse._SubParsersAction) and (action.metavar or action.dest) in message:
                return list(action.choices)
        return None

    def _bare_word_hint(self, message: str) -> str | None:
        """What a bare word may have meant, from the hook a flag's module set (tools/stack_name.py: a stack's
        name given without --stack), or None."""
        hook = getattr(self, "bare_word_hint", None)
        words = message.split()[2:] if message.startswith("unrecognized arguments: ") else []
        if hook is None or not words or words[0].startswith("-"):
            return None
        return hook(words[0])

    def _positional_file(self, message: str) -> str | None:
        """A bare word that is a file here, or named like a data file, given to a parser with --dataset (TRL's
        scripts and `axolotl train` take their file without a flag): the word, to give after --dataset."""
        if not message.startswith("unrecognized arguments: ") or "--dataset" not in self._option_string_actions:
            return None  # (`axolotl train run.yaml` takes its settings file so too: --config, which has --dataset)
        import os

        words = message.split()[2:]
        if not words or words[0].startswith("-") or shown(words[0]) != repr(words[0]):
            return None
        word = words[0]
        looks_like_data = word.lower().endswith((".txt", ".jsonl", ".json", ".csv", ".parquet", ".gz", ".yaml", ".yml"))
        return word if looks_like_data or os.path.isfile(word) else None


def _whole_number(message: str) -> str | None:
    """argparse's `argument --steps: invalid int value: '1e3'` (or '2_000', '1,000', '500.0'): the flag and the
    whole number it wrote, or None."""
    found = re.search(r"^argument (--\w+): invalid int value: '([0-9.eE+,_]{1,20})'$", message)
    if found is None:
        return None
    try:
        number = float(found[2].replace(",", "").replace("_", ""))
    except ValueError:
        return None
    return f"{found[1]} {int(number)}" if number.is_integer() and abs(number) < 1e12 else None


def _nearest_choice(message: str) -> str | None:
    """argparse's `invalid choice: 'lsit' (choose from 'list', 'logs', ...)`: the choice nearest the word, or None."""
    found = re.search(r"invalid choice: '([^']*)' \(choose from (.*)\)$", message)
    if found is None:
        return None
    import difflib

    choices = re.findall(r"'([^']*)'", found[2])
    match = difflib.get_close_matches(found[1], choices, n=1) or difflib.get_close_matches(found[1].lower(), choices, n=1)
    return match[0] if match else None


def user_path(value: str) -> str:
    """A path on this machine with a leading `~` as the user's home, as the shell makes it: also where no shell
    expanded it (quoted, after `--flag=`, read from a --config file), which made a directory named `~` in the working
    directory, or "no such directory" for one that is there. argparse's type for a path argument."""
    return os.path.expanduser(value) if value.startswith("~") else value


NAME_CHARS = 256


def named(value: str) -> str:
    """argparse's type for a flag that names something whose absence means a default (`--profile`): a blank value
    (`--profile "$PROFILE"` with PROFILE unset) is refused, not taken as the default it would silently become."""
    if not value.strip():
        raise argparse.ArgumentTypeError("is empty (an unset shell variable?); give a name, or leave the flag out for "
                                         "the default")
    # A name is one line of printable characters: an AWS profile is an INI section's name (botocore's configloader
    # reads `[profile NAME]` from one line), so a newline or a control character names none; refused before boto3.
    if not value.isprintable() or len(value) > NAME_CHARS:
        raise argparse.ArgumentTypeError(f"{shown(value)} is no name: a name is one line of at most {NAME_CHARS} "
                                         "printable characters")
    return value


def comma_list(flag: str, value: str, example: str) -> list[str]:
    """A comma-separated flag's items, stripped: an empty item (`a,,b`, a leading or trailing comma) or one listed twice
    is a typo or an unset shell variable (`--regions "$A,$B"`), refused naming the flag, not dropped."""
    items = [item.strip() for item in value.split(",")]
    if "" in items:
        where = "a leading comma" if items[0] == "" else "a trailing comma" if items[-1] == "" else "two commas in a row"
        raise ValueError(f"{flag}: an empty item ({where}, or an unset shell variable); give items separated by "
                         f"single commas, such as {example}")
    if twice := sorted({item for item in items if items.count(item) > 1}):
        raise ValueError(f"{flag}: {shown(twice[0])} is listed twice; give each item once, such as {example}")
    return items


def parser(prog: str, description: str, *, check_failed: str) -> argparse.ArgumentParser:
    return _Parser(prog=prog, description=description, epilog=exit_codes_help(check_failed),
                   formatter_class=_HelpFormatter)


def table(rows: Sequence[Sequence[str]]) -> list[str]:
    """Rows as left-aligned columns two spaces apart, the first row the header: how the commands print tables."""
    widths = [max(len(row[column]) for row in rows) for column in range(len(rows[0]))]
    return ["  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip() for row in rows]


def run(main: Callable[[Sequence[str] | None], int], argv: Sequence[str] | None = None) -> int:
    """Call `main(argv)` and map what it raises to an exit code and a short message on stderr.

    SIGTERM and SIGHUP (the terminal closed) are raised as KeyboardInterrupt, so a killed command unwinds its
    `finally` blocks (a local Ray cluster stopped, a probe reservation cancelled) exactly as Ctrl-C does.
    """
    # A signal already ignored stays so: `nohup python -m workload.local` must survive its terminal.
    previous = {sig: signal.signal(sig, _interrupt) for sig in STOPPING_SIGNALS
                if signal.getsignal(sig) is not signal.SIG_IGN}
    try:
        return main(argv)
    except CommandError as error:
        return _fail(error.exit_code, str(error), error.hint)
    except ValueError as error:
        return _fail(USAGE, str(error))
    except KeyboardInterrupt:
        return _fail(INTERRUPTED, "interrupted")
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _interrupt(signum, _frame) -> None:
    raise KeyboardInterrupt(signal.Signals(signum).name)


# The last bound on what any refusal repeats, past every message's own: a path or a name given by the user, a key of
# a file read, is cut at ERROR_WORD_CHARS (PATH_MAX is 4,096, and a path a person types is far shorter), and the
# whole line at ERROR_LINE_CHARS, each cut saying how long it was.
ERROR_WORD_CHARS = 1000
ERROR_LINE_CHARS = 2000


def _cut(text: str) -> str:
    """`text` within ERROR_WORD_CHARS a word and ERROR_LINE_CHARS a line, each cut saying how long it was. A cut never
    ends inside what may be a URI's credentials (the masking after it could not see user:pass without its '@'): an
    over-long word holding '@' or '://' is not shown at all, and the line is cut at a word's end."""
    text = " ".join(word if len(word) <= ERROR_WORD_CHARS else
                    f"{word[:ERROR_WORD_CHARS]}... ({len(word):,} characters)"
                    if "@" not in word and "://" not in word else f"(a value of {len(word):,} characters)"
                    for word in text.split(" "))
    if len(text) <= ERROR_LINE_CHARS:
        return text
    head = text[:ERROR_LINE_CHARS]
    return f"{head[:head.rfind(' ')] if ' ' in head else head}... ({len(text):,} characters)"


def note(message: str) -> None:
    """A line that informs without refusing (`note: ...` on stderr), masked as every refusal is: a note quotes values
    too (a flag, a variable, what a checkpoint's files say)."""
    from workload.config.secret_text import masked  # on this path only: the package is not light

    print(f"note: {masked(_cut(message))}", file=sys.stderr, flush=True)


def _fail(code: int, message: str, hint: str = "") -> int:
    # Every refusal of every command leaves here: whichever check wrote it, a credential-shaped part of what it quotes
    # (a URI's user:password@, a token whose vendor no rule names yet) is masked before it is printed.
    from workload.config.secret_text import masked  # on the error path only: the package is not light

    print(f"error: {masked(_cut(message))}", file=sys.stderr)
    if hint:
        print(masked(_cut(hint)), file=sys.stderr)
    sys.stderr.flush()
    return code
