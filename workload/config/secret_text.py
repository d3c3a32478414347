"""Credential-shaped text masked wherever the project prints what a user or an untrusted file gave: one function,
`masked`, applied where refusals leave the program (the Pulumi program's refusal path, infra/config/schema.py
`hides_secret_values` and `warn`; every command's error exit, workload/cli.py `_fail`) and to what a command prints
from a file it did not write (workload.transport's JSON, a loss curve's title). Each message's own quoting
(fields.shown_value, cli.shown) still applies first; this is the last rule, which holds whichever check refused.

What it masks, in this order:
- user information in a URI, scheme://user:password@host -> scheme://[credentials hidden]@host (RFC 3986 section
  3.2.1: "Use of the format user:password in the userinfo field is deprecated" because it puts the password in text),
  and a query or fragment parameter named like a credential (?token=..., #access_token=...: the rule of
  workload/config/uri_credentials.py credential_parameter);
- every vendor shape of fields.TOKEN_VALUE (the Hub's hf_, GitHub's, AWS's, gitleaks' rules...);
- a run of letters and digits that reads as random whatever its prefix (`random_looking`): the shapes list grows
  with each vendor, and this catches one that is not in it yet.

Linear in the text's length (no backtracking pattern over user input). Standard library only (with its package,
about 0.15 s to import): the error path of every command imports it.
"""
from __future__ import annotations

import re
from typing import Any

from workload.config.fields import TOKEN_VALUE
from workload.config.uri_credentials import credential_parameter

TOKEN_SHOWN = "[token hidden]"
CREDENTIALS_SHOWN = "[credentials hidden]"

# The generic rule's threshold. A run is the longest stretch of ASCII letters, digits, '+' and '/' (base64's, as in an
# AWS secret access key) between other characters (so '-', '_', '.' and ':' split it: a repo id, a split, a module
# name, a file name, an image digest's 'sha256:' are several runs). It reads as random when it is at least
# RANDOM_RUN_CHARS long and
#   - holds both cases and either LONE_LOWER_MIN lone lower-case letters (one between two characters that are not
#     lower-case, as 'z' in 'Qz7': random base62 text has about three in 20 characters, CamelCase names none, their
#     lower-case letters come in words: 'Qwen2ForCausalLM'), or DIGIT_GROUPS_MIN separate groups of digits
#     ('Wav2Vec2Bert' has two);
#   - or, in one case only, is at least SINGLE_CASE_RUN_CHARS long, holds DIGIT_GROUPS_MIN groups of digits and a
#     letter past 'f' (so hexadecimal, a digest, a git commit, an MLflow run id, is never taken for a token).
# Measured on this machine (tests/unit/test_secret_text.py holds it to this): of random base62 keys of 40 characters
# 3 in 4,000 pass unmasked (their lower-case letters all in pairs or more, their digits in two groups or fewer), of
# 32 characters 1 in 100, of 20 characters 8 in 100 (a vendor's shape that short belongs in fields.TOKEN_VALUE); of
# transformers' 2,071 names of 20 or more letters and digits, 12 are masked (DINOv3ViT..., SeamlessM4Tv2...,
# SLANeXt...); none of the project's shipped values (model ids, splits, module names, file names, the shipped
# configs' and Pulumi*.yaml values, image references) is.
RANDOM_RUN_CHARS = 20
SINGLE_CASE_RUN_CHARS = 32
LONE_LOWER_MIN = 2
DIGIT_GROUPS_MIN = 3
_RUN = re.compile(r"[A-Za-z0-9+/]+")
_LONE_LOWER = re.compile(r"(?<![a-z])[a-z](?![a-z])")
_DIGITS = re.compile(r"[0-9]+")
_HEX = re.compile(r"[0-9A-Fa-f]+")


def random_looking(run: str) -> bool:
    """Whether `run`, a stretch of letters, digits, '+' and '/', reads as a random key (the thresholds above)."""
    if len(run) < RANDOM_RUN_CHARS:
        return False
    digit_groups = len(_DIGITS.findall(run))
    if any(char.isupper() for char in run) and any(char.islower() for char in run):
        return len(_LONE_LOWER.findall(run)) >= LONE_LOWER_MIN or digit_groups >= DIGIT_GROUPS_MIN
    return (len(run) >= SINGLE_CASE_RUN_CHARS and digit_groups >= DIGIT_GROUPS_MIN and not _HEX.fullmatch(run)
            and not _HEX.fullmatch(run.replace("/", "")))


_AUTHORITY_END = re.compile(r"[\s/]")


def _without_userinfo(text: str) -> str:
    """`text` with the user information of each scheme://user:password@host blanked out. Each '://' is looked at once,
    up to the next whitespace or '/' (which user information never holds), so the pass is linear."""
    pieces, start, at = [], 0, text.find("://")
    while at >= 0:
        authority_start = at + 3
        stop = _AUTHORITY_END.search(text, authority_start)
        end = len(text) if stop is None else stop.start()
        last_at = text.rfind("@", authority_start, end)
        if last_at >= 0:
            pieces.append(text[start:authority_start] + CREDENTIALS_SHOWN)
            start = last_at
        # the next '://' may begin just before `end` (its '/' is what ended this authority)
        at = text.find("://", authority_start)
    pieces.append(text[start:])
    return "".join(pieces)


_PARAMETER = re.compile(r"([?&;#])([A-Za-z0-9_.\-]{1,64})=([^&;#\s'\"]*)")


def _without_credential_parameters(text: str) -> str:
    """`text` with the value of each URI parameter named like a credential (?token=, &X-Amz-Signature=) blanked out,
    in words that hold a URI."""
    if "://" not in text:
        return text

    def word(part: str) -> str:
        if "://" not in part:
            return part
        return _PARAMETER.sub(lambda found: found[0] if not credential_parameter(found[2]) else
                              f"{found[1]}{found[2]}={CREDENTIALS_SHOWN}", part)

    return "".join(word(part) for part in re.split(r"(\s+)", text))


def holds_token(text: str) -> bool:
    """Whether `text` holds a credential by the rule `masked` hides them with: a vendor's token shape
    (fields.TOKEN_VALUE) or a run of letters and digits that reads as random. What a value that is shown, or sent where
    it is shown (trainEnv: Ray's dashboard), must not hold."""
    return bool(TOKEN_VALUE.search(text)) or any(random_looking(run) for run in _RUN.findall(text))


# The most of one text that is masked and kept: every command prints at most 2,000 characters of a message
# (workload/cli.py ERROR_LINE_CHARS) and a refusal at preview is one line; the rest is dropped, not printed unmasked.
MASKED_MAX_CHARS = 65_536


def masked(text: str) -> str:
    """`text` with every credential-shaped part replaced: URI user information and credential parameters, each
    vendor's token shape (fields.TOKEN_VALUE), and every run of letters and digits that reads as random."""
    if len(text) > MASKED_MAX_CHARS:  # cut at a word's end: half a URI would show user:pass without its '@'
        head = text[:MASKED_MAX_CHARS]
        return masked(head[:head.rfind(" ")] if " " in head else head) + f"... ({len(text):,} characters in all)"
    text = _without_userinfo(_without_credential_parameters(text))
    text = TOKEN_VALUE.sub(TOKEN_SHOWN, text)
    return _RUN.sub(lambda run: TOKEN_SHOWN if random_looking(run[0]) else run[0], text)


def masked_data(value: Any) -> Any:
    """`value` (JSON-like: dicts, lists, strings, numbers) with every string in it, keys too, `masked`: what a command
    prints of a file it did not write."""
    if isinstance(value, str):
        return masked(value)
    if isinstance(value, dict):
        return {masked_data(key): masked_data(item) for key, item in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [masked_data(item) for item in value]
    return value
