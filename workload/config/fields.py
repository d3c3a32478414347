"""One declaration per setting: each TrainConfig field's flag, its stack key (for those `pulumi up` sets), type,
default, bounds or choices, help and secrecy, in the field's metadata. Everything that names or checks a setting is
derived from it: the flags (workload.config.build_parser), the stack key <-> flag table, the translation of a stack
value to the flag's value, and one check of the bounds or choices whose refusal names the flag (`--steps ...`) on the
job's side and the stack key (`config key 'trainSteps': ...`) at preview.

Standard library only: the Pulumi program imports it at preview.
"""
from __future__ import annotations

import dataclasses
import math
import re
import unicodedata
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

from workload.config.uri_credentials import has_credentials
from workload.config.uri_credentials import shown_uri as _shown_uri

# Pulumi.yaml's type of a stack key for each field type. Pulumi config has no float type: a decimal is a string.
PULUMI_TYPES = {"str": "string", "int": "integer", "bool": "boolean", "float": "string"}
# Characters a free-text setting may hold unless its declaration says otherwise: a name (a field, a split, a project)
# fits in 256, a URI or a path in 2048 (the common bound of URLs in HTTP clients and S3 keys' 1024 bytes plus the
# bucket). Without a bound, a 300,000-character value passes and then exceeds Linux's argument limit on the cluster
# (MAX_ARG_STRLEN, 128 KiB per argument) or ends in a traceback from the file system (NAME_MAX, 255 bytes).
NAME_MAX_LENGTH = 256
URI_MAX_LENGTH = 2048
# Credentials in a URI (user:password@, ?token=, #access_token=) and how a refusal quotes a URI: one rule each, in
# workload/config/uri_credentials.py (linear in the value's length).
CREDENTIALS_ALLOWED = ("no user:password@ (nor a token, key or signature parameter, nor any named like a credential, "
                       "in the query or the fragment) in a URI; credentials go in the environment the tool reads them "
                       "from (the stack's trainSecretEnv, e.g. MLFLOW_TRACKING_TOKEN, or MLFLOW_TRACKING_USERNAME and "
                       "MLFLOW_TRACKING_PASSWORD)")

# A value shaped like a token whatever it is called: the Hub's (hf_...), GitHub's (ghp_..., github_pat_...), an AWS
# access key id (AKIA/ASIA and 16 more), OpenAI-style keys (sk-...). Plain in a flag, a stack key's config, the job's
# entrypoint and Ray's dashboard. Bounded lengths keep ordinary words (hf_home, sk-learn) out. infra/config/env_names.py
# applies it to trainEnv's values too.
# Also the well-known prefixes of GitHub's secret scanning patterns list (docs.github.com, "Supported secret scanning
# patterns") and gitleaks' rules: GitLab's glpat-/gldt-/glrt-/glptt-, Slack's xox[abeprs]-, Stripe's sk_live_/rk_live_,
# npm's npm_, PyPI's pypi-, Google's AIza, and a JWT (three base64url segments, the header's '{"' as eyJ); Databricks'
# personal access tokens (dapi...), and Slack's and Discord's incoming-webhook URLs, whose path is the secret (anyone
# holding it posts to the channel).
# And by each vendor's documented prefix (gitleaks' config/gitleaks.toml rules, which follow the vendors' formats):
# Pulumi's access tokens pul- and 40 hex ("pulumi-api-token"), HashiCorp Vault's service, batch and recovery tokens
# hvs./hvb./hvr. (Vault docs, "Tokens": token prefixes; "vault-service-token", "vault-batch-token"), the Hub's
# organization tokens api_org_ and 34 letters ("huggingface-organization-api-token"), Linear's lin_api_ and 40
# ("linear-api-key"), Atlassian's API tokens ATATT3... ("atlassian-api-token": 192 characters; any 40 or more here),
# Stripe's test keys sk_test_/rk_test_ ("stripe-access-token"), Slack's app-level xapp-N-... ("slack-app-token"), age's
# AGE-SECRET-KEY-1 ("age-secret-key"), Postman's PMAK- ("postman-api-token"), and NVIDIA's API keys for NGC and its
# hosted NIMs, nvapi-... (NVIDIA NeMo Retriever docs, "Authentication and API keys": "Keys typically start with
# nvapi-") PlanetScale's service tokens, passwords and OAuth tokens, pscale_tkn_/pscale_pw_/pscale_oauth_ and 32
# to 64 of [a-z0-9=_.-] in any case (gitleaks' "planetscale-api-token", "planetscale-password",
# "planetscale-oauth-token").
# xAI's API keys, xai- and 80 (the keys console.x.ai issues; no gitleaks rule yet), Tavily's, tvly- with an optional
# dev-/prod- (docs.tavily.com quickstart: TavilyClient(api_key="tvly-YOUR_API_KEY")), and Meta's Graph API access
# tokens, EAA and a capital (gitleaks' "facebook-page-access-token" EAA[MC] and "square-access-token" EAAA; EAAB, EAAC
# begin app and user tokens); Grafana Cloud's access-policy tokens, glc_ and base64 of 32 or more (gitleaks'
# "grafana-cloud-api-token", glc_[A-Za-z0-9+/]{32,400}={0,3}) and Grafana's service-account tokens, glsa_, 32, '_' and
# 8 hex ("grafana-service-account-token"). A shape not in this list yet is still masked in every refusal and every output taken
# from an untrusted file: workload/config/secret_text.py.
TOKEN_VALUE = re.compile(r"(?<![A-Za-z0-9])(hf_[A-Za-z0-9]{30,}|gh[pousr]_[A-Za-z0-9]{20,}|github_pat_[A-Za-z0-9_]{20,}"
                         r"|(AKIA|ASIA)[A-Z0-9]{16}(?![A-Za-z0-9])|sk-[A-Za-z0-9_-]{20,}"
                         r"|gl(pat|dt|rt|ptt)-[A-Za-z0-9_-]{20,}|xox[abeprs]-[A-Za-z0-9-]{10,}|[rs]k_live_[A-Za-z0-9]{20,}"
                         r"|npm_[A-Za-z0-9]{30,}|pypi-[A-Za-z0-9_-]{50,}|AIza[A-Za-z0-9_-]{35}"
                         r"|eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}"
                         r"|dapi[A-Za-z0-9]{24,}|hooks\.slack\.com/services/[A-Za-z0-9]+/[A-Za-z0-9]+/[A-Za-z0-9]{8,}"
                         r"|discord(?:app)?\.com/api/webhooks/[0-9]+/[A-Za-z0-9_-]{20,}"
                         r"|pul-[a-f0-9]{40}|nvapi-[A-Za-z0-9_-]{40,}|hv[sbr]\.[A-Za-z0-9_-]{24,}|api_org_[A-Za-z]{34}"
                         r"|lin_api_[A-Za-z0-9]{40}|ATATT3[A-Za-z0-9_=-]{40,}|[rs]k_(?:test|prod)_[A-Za-z0-9]{10,}"
                         r"|xapp-[0-9]-[A-Za-z0-9]+-[0-9]+-[A-Za-z0-9]{16,}|AGE-SECRET-KEY-1[0-9A-Z]{58}"
                         r"|PMAK-[a-fA-F0-9]{24}-[a-fA-F0-9]{34}|pscale_(?:tkn|pw|oauth)_[A-Za-z0-9=_.-]{32,}"
                         r"|xai-[A-Za-z0-9]{20,}|tvly-(?:dev-|prod-)?[A-Za-z0-9]{20,}|EAA[A-Z][A-Za-z0-9]{20,}"
                         r"|glc_[A-Za-z0-9+/]{32,}|glsa_[A-Za-z0-9]{32}_[A-Fa-f0-9]{8})")
TOKEN_SHAPES = "hf_, ghp_, github_pat_, AKIA, sk-, glpat-, xoxb-, sk_live_, npm_, pypi-, AIza, dapi, a JWT, a webhook..."


def looks_like_token(value: str) -> bool:
    """Whether `value` holds something shaped like an access token or key (never quoted by the caller)."""
    return bool(TOKEN_VALUE.search(value))


# A refused choice is quoted only when it is short enough to be a mistyped choice: a longer value, or one shaped like
# a token, may be a secret pasted into the wrong key or flag (an AWS secret access key is 40 characters of no prefix).
CHOICE_SHOWN_CHARS = 16


def shown_choice(value: object) -> str:
    """A value that is not one of a key's or flag's choices, as every refusal of a choice quotes it: whole (repr) when
    it is at most CHOICE_SHOWN_CHARS printable characters and not shaped like a token, else by its length only."""
    text = str(value)
    if len(text) <= CHOICE_SHOWN_CHARS and text.isprintable() and not looks_like_token(text):
        return repr(value)
    return f"a value of {len(text)} characters (not shown)"


# A comma list of choices (--report_to tensorboard,wandb; --lora_targets q_proj,v_proj) is a choice per item: a secret
# pasted as one item is a secret pasted into the key, so each item is quoted as shown_choice quotes a single choice,
# never the value whole (27 characters of `tensorboard,hf_...` pass shown_value's 100). The first LIST_SHOWN_ITEMS
# items, then a count: the list is bounded by its setting's characters, not by its items.
LIST_SHOWN_ITEMS = 8


def shown_items(items: Sequence[str]) -> str:
    """The items of a comma list (`value.split(",")`) as every refusal of a list of choices quotes them: each through
    shown_choice (`'tensorboard', a value of 27 characters (not shown)`)."""
    items = [str(item).strip() for item in items]
    more = f" and {len(items) - LIST_SHOWN_ITEMS:,} more" if len(items) > LIST_SHOWN_ITEMS else ""
    return ", ".join(shown_choice(item) for item in items[:LIST_SHOWN_ITEMS]) + more


# How much of one free-text value a refusal repeats: a rule quotes the values it compares (`--chat_template X applies
# to chat ... examples`), and a free-text value may be 2,048 characters, or a secret pasted into the wrong setting.
SHOWN_VALUE_CHARS = 100


def quotable(value: str) -> bool:
    """Whether a refusal may repeat `value` as it is: at most SHOWN_VALUE_CHARS printable characters, holding no token
    and no URI credentials."""
    return (len(value) <= SHOWN_VALUE_CHARS and value.isprintable() and not looks_like_token(value)
            and not has_credentials(value))


def shown_value(value: str) -> str:
    """`value` as a refusal quotes it: whole (repr) when quotable, else by its length."""
    return repr(value) if quotable(value) else f"a value of {len(value):,} characters (not shown)"


# Unicode's categories of characters that are not shown as themselves: Cc (control: newline, NUL, bell, escape), Cf
# (format: U+202E, zero-width space), Zl and Zp (U+2028 LINE SEPARATOR, U+2029 PARAGRAPH SEPARATOR, which
# str.splitlines, JavaScript and many log viewers break a line at, as at a newline).
HIDDEN_CATEGORIES = ("Cc", "Cf", "Zl", "Zp")


def hidden_character(value: str) -> int | None:
    """The index of the first character of a HIDDEN_CATEGORIES category in `value`, or None. Such a character forges
    lines in a log or a refusal, ends a C string, or shows one name while meaning another; no setting's legitimate
    value holds one."""
    return next((index for index, char in enumerate(value) if unicodedata.category(char) in HIDDEN_CATEGORIES), None)


def shown_uri(uri: str) -> str:
    """`uri` as every refusal that quotes a URI quotes it: scheme://host[:port]/path, never its user information, query
    or fragment, and nothing when its path holds something shaped like a token."""
    if looks_like_token(uri):
        return "a URI (its value is not shown: it holds something shaped like a token)"
    return _shown_uri(uri)


def text_problem(value: str, max_length: int) -> str | None:
    """The rule every free-text value follows, on both sides: at most `max_length` characters, no control, format or
    line-separator character, no credentials in a URI, and nothing shaped like a token. The refusal never quotes the value (it may be a megabyte, hold a password,
    or hold a newline that would forge a second line of the message)."""
    if len(value) > max_length:
        return f"must be at most {max_length:,} characters, got {len(value):,} (its value is not shown)"
    if (index := hidden_character(value)) is not None:
        if ("{%" in value or "{{" in value) and "\n" in value:  # a chat template's text pasted where its path goes
            return ("must be a name or a path, got a template's text (Jinja markup over several lines; its value is "
                    "not shown): save it as a .jinja file and give the file's path where the setting takes one "
                    "(--chat_template template.jinja)")
        return ("must hold no control, format or line-separator character (newline, tab, NUL, escape, bidi override, "
                f"zero-width, U+2028, U+2029), got U+{ord(value[index]):04X} at character {index} (its value is not "
                "shown)")
    if has_credentials(value):
        return f"must hold {CREDENTIALS_ALLOWED}, got a URI with credentials (its value is not shown)"
    if looks_like_token(value):
        return (f"must hold no token ({TOKEN_SHAPES}): a token goes in the environment (the stack's trainSecretEnv, "
                "e.g. HF_TOKEN or WANDB_API_KEY), got a value shaped like one (its value is not shown)")
    return None


@dataclass(frozen=True)
class Declaration:
    """One setting, as flag(...) declared it on a TrainConfig field."""

    name: str
    """The field and its flag, --name."""
    type: str
    default: Any
    help: str
    stack_key: str | None = None
    """The train* key of Pulumi.yaml that sets it; None for a job-only flag (--seed, --compile)."""
    at_least: float | None = None
    above: float | None = None
    at_most: float | None = None
    below: float | None = None
    choices: tuple[str, ...] | None = None
    pattern: tuple[re.Pattern, str] | None = None
    """A value (other than empty) must fullmatch the pattern; the words say what it is."""
    meaning: str = ""
    """What the bounds' special values mean, shown in a refusal (`-1 retries forever`); flags written --name."""
    secret: bool = False
    """May hold a token: no refusal quotes its value."""
    check: Callable[[str], str | None] | None = None
    """A rule of the setting's own over a non-empty value (the Hub's repo-id rule): its 'must be ...', or None."""
    max_length: int | None = None
    """The most characters a str setting holds (NAME_MAX_LENGTH unless declared, URI_MAX_LENGTH for URIs and paths)."""
    value_aliases: Mapping[str, str] | None = None
    """Choices another tool names otherwise (TRL's truncation_mode keep_start): their value -> ours, taken as ours."""
    comma_list: bool = False
    """A comma list of names (--report_to, --lora_targets): its refusals quote each item by shown_items (each
    refusal calls it; the mark is what tests/unit/test_choice_list_items.py walks, so a new list is walked too)."""

    def canonical(self, value: Any) -> Any:
        """`value` with another tool's name for one of the choices (value_aliases) written as ours, in any letter case
        and with '_' for '-' (`Cosine`, `LoRA`, `FULL_SHARD`, `prompt_completion`)."""
        if not isinstance(value, str) or self.choices is None or value in self.choices:
            return value
        folded = value.strip().lower().replace("_", "-")
        by_fold = {**{theirs.replace("_", "-"): ours for theirs, ours in (self.value_aliases or {}).items()},
                   **{choice.lower().replace("_", "-"): choice for choice in self.choices}}
        return by_fold.get(folded, value)

    @property
    def flag(self) -> str:
        return f"--{self.name}"

    def problem(self, value: Any) -> str | None:
        """Why `value` is out of this setting's bounds or choices ('must be ...'), or None. The caller names it."""
        if isinstance(value, str) and (why := text_problem(value, self.max_length or NAME_MAX_LENGTH)) is not None:
            return why
        if self.check is not None and value and (why := self.check(value)) is not None:
            return why
        got = "its value is not shown" if self.secret else f"got {_shown(value)}"
        note = f" ({self.meaning})" if self.meaning else ""
        if self.choices is not None:
            if self.canonical(value) in self.choices:
                return None
            shown = [choice for choice in self.choices if choice]
            empty = "empty or " if "" in self.choices else ""
            also = "".join(f" ({theirs} is taken as {ours})" for theirs, ours in (self.value_aliases or {}).items())
            got = "its value is not shown" if self.secret else f"got {shown_choice(value)}"
            return f"must be {empty}one of {', '.join(shown)}{also}{note}, {got}"
        if self.pattern is not None:
            pattern, words = self.pattern
            return None if not value or pattern.fullmatch(value) else f"must be {words}{note}, {got}"
        bounds = _bounds_words(self)
        if not bounds or value is None:
            return None
        if self.type.startswith("int") and (not isinstance(value, int) or isinstance(value, bool)):
            return f"must be an integer {bounds}{note}, {got}"
        # An int is finite however long (math.isfinite would overflow converting a 400-digit one to a float).
        if not isinstance(value, (int, float)) or isinstance(value, bool) or (
                isinstance(value, float) and not math.isfinite(value)):
            return f"must be a finite number {bounds}{note}, {got}"
        if ((self.at_least is not None and not value >= self.at_least)
                or (self.above is not None and not value > self.above)
                or (self.at_most is not None and not value <= self.at_most)
                or (self.below is not None and not value < self.below)):
            return f"must be {bounds}{note}, {got}"
        return None

    def from_stack(self, value: Any) -> Any:
        """The stack key's value (Pulumi.yaml's type) as the flag's: a decimal string becomes a float."""
        if not self.type.startswith("float"):
            return value
        try:
            number = float(value)
        except (TypeError, ValueError):
            # Quoted as every typed read's refusal quotes a value (shown_choice, as infra/config/schema.py's for
            # Pulumi's integers and booleans): a number mistyped is short; a token or a 40-character secret is not.
            raise ValueError(f"config key {self.stack_key!r}: {shown_choice(str(value))} is not a number") from None
        return number

    def to_stack(self, value: Any) -> Any:
        """The flag's value as the stack key holds it (the inverse of from_stack)."""
        return str(value) if self.type.startswith("float") else value


def _shown(value: Any) -> str:
    """A value as a refusal quotes it: whole when short, else by its length (a 400-digit --batch_size is not echoed)."""
    text = repr(value) if not isinstance(value, int) or abs(value) < 10 ** 80 else ""
    return text if text and len(text) <= 80 else f"a value of {len(str(value)) if text else 'over 80'} characters"


def _bounds_words(declaration: Declaration) -> str:
    low = (f"at least {declaration.at_least}" if declaration.at_least is not None else
           f"above {declaration.above}" if declaration.above is not None else "")
    high = (f"at most {declaration.at_most}" if declaration.at_most is not None else
            f"below {declaration.below}" if declaration.below is not None else "")
    return " and ".join(words for words in (low, high) if words)


def flag(default, help_text: str, *, stack_key: str | None = None, at_least: float | None = None,
         above: float | None = None, at_most: float | None = None, below: float | None = None,
         choices: Sequence[str] | None = None, pattern: tuple[re.Pattern, str] | None = None, meaning: str = "",
         secret: bool = False, max_length: int | None = None, check: Callable[[str], str | None] | None = None,
         value_aliases: Mapping[str, str] | None = None, comma_list: bool = False):
    """A TrainConfig field and its one declaration, kept in the field's metadata.

    Not docstrings under each field read back with ast.parse: CPython 3.11's AST constructor can fail with a
    spurious "recursion depth mismatch" while other threads run (python/cpython#106905), and Ray starts threads.
    """
    declared = dict(help=help_text, stack_key=stack_key, at_least=at_least, above=above, at_most=at_most,
                    below=below, choices=tuple(choices) if choices is not None else None, pattern=pattern,
                    meaning=meaning, secret=secret, max_length=max_length, check=check, value_aliases=value_aliases,
                    comma_list=comma_list)
    return dataclasses.field(default=default, metadata=declared)


def declarations(config_class: type) -> tuple[Declaration, ...]:
    """Every field of `config_class` (TrainConfig) as its Declaration, in field order."""
    return tuple(Declaration(name=field.name, type=str(field.type), default=field.default,
                             **{**field.metadata, "max_length": field.metadata.get("max_length") or (
                                 NAME_MAX_LENGTH if str(field.type) == "str" else None)})
                 for field in dataclasses.fields(config_class))


def check_bounds(declared: Sequence[Declaration], values: Any) -> None:
    """The job's side: each field's bounds or choices, a refusal naming the flag."""
    for declaration in declared:
        if (why := declaration.problem(getattr(values, declaration.name))) is not None:
            raise ValueError(f"{declaration.flag} {why}")


_FLAG = re.compile(r"--([a-z][a-z0-9_]*)")


def rename_flags(text: str, stack_keys: dict[str, str]) -> str:
    """`text` with each flag the stack sets (--steps) written as its key (trainSteps)."""
    return _FLAG.sub(lambda match: stack_keys.get(match.group(1), match.group(0)), text)


def in_stack_terms(message: str, stack_keys: dict[str, str]) -> str:
    """A refusal of the job's, with its flags (--checkpoint_every) named as the stack keys that set them
    (`stack_keys`: flag name -> key), led by the keys it names."""
    keys = [stack_keys[name] for name in _FLAG.findall(message) if name in stack_keys]
    named = rename_flags(message, stack_keys)
    if not keys:
        return f"train* config keys do not make a valid job: {named}"
    return f"config key{'s' if len(set(keys)) > 1 else ''} {', '.join(repr(k) for k in dict.fromkeys(keys))}: {named}"
