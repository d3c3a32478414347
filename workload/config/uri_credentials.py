"""Credentials in URIs, and how a refusal may quote a URI. One rule each: a URI holds credentials when its authority
has user information (scheme://user[:password]@host) or a query or fragment parameter is named like a credential
(?token=, ?Authorization=, &X-Amz-Signature=, #access_token=); and a refusal quotes a URI as scheme://host/path only
(`shown_uri`), never its user information, query or fragment, whatever made it refuse.

Linear in the value's length: the value is split on whitespace, each word at its '://' and at its parameters'
separators, with no backtracking pattern (a regex over `scheme://...[?&]name=` took seconds on 32,768 letters).

Standard library only: the Pulumi program imports it at preview.
"""
from __future__ import annotations

from urllib.parse import urlsplit

_SCHEME_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789+.-")
# Words of a parameter's name that say it holds a credential, by substring of the name in lower case: a token, a
# password (pwd, passwd), a secret, a signature (a presigned URL's X-Amz-Signature, Azure's sig), an authorization
# header's value, a credential, a session, an API key.
_CREDENTIAL_PARTS = ("token", "secret", "passw", "pwd", "auth", "credential", "session", "signature", "apikey",
                     "api_key", "api-key", "accesskey", "access_key", "privatekey", "private_key")
# ... and by whole word (the name split at '_', '-' and '.'): key and sig are parts of too many other words.
_CREDENTIAL_WORDS = frozenset({"key", "sig", "pass", "pw", "sid"})
_PARAMETER_SEPARATORS = str.maketrans({"?": "&", ";": "&", "#": "&"})
_WORD_SEPARATORS = str.maketrans({"-": "_", ".": "_"})


def credential_parameter(name: str) -> bool:
    """Whether a query or fragment parameter named `name` holds a credential (token, Authorization, pwd, sig...)."""
    lower = name.lower()
    if any(part in lower for part in _CREDENTIAL_PARTS):
        return True
    return any(word in _CREDENTIAL_WORDS for word in lower.translate(_WORD_SEPARATORS).split("_"))


def _uri_starts(word: str) -> list[int]:
    """The indexes just past each '://' in `word` that follows a scheme's character."""
    starts, index = [], word.find("://")
    while index != -1:
        if index > 0 and word[index - 1] in _SCHEME_CHARS:
            starts.append(index + 3)
        index = word.find("://", index + 3)
    return starts


def _word_has_credentials(word: str) -> bool:
    starts = _uri_starts(word)
    if not starts:
        return False
    for start in starts:  # each authority ends at the next '/', so together they are read once
        end = len(word)
        for stop in "/?#":
            if (found := word.find(stop, start)) != -1:
                end = min(end, found)
        if "@" in word[start:end]:
            return True
    first = starts[0]
    cut = min((found for stop in "?#;" if (found := word.find(stop, first)) != -1), default=-1)
    if cut == -1:
        return False
    parameters = word[cut:].translate(_PARAMETER_SEPARATORS).split("&")
    return any(credential_parameter(item.partition("=")[0]) for item in parameters if "=" in item)


def has_credentials(value: str) -> bool:
    """Whether `value` holds, anywhere, a URI with user information (scheme://user[:password]@...) or a parameter
    named like a credential in its query or fragment (?token=..., #access_token=...)."""
    return "://" in value and any(_word_has_credentials(word) for word in value.split() if "://" in word)


def shown_uri(uri: str) -> str:
    """`uri` as a refusal may quote it: repr of scheme://host[:port]/path, with no user information, query or
    fragment (each may hold a credential); or words saying it is not shown, when it does not parse as one."""
    try:
        parts = urlsplit(uri)
        host = parts.hostname or ""
        port = f":{parts.port}" if parts.port is not None else ""
    except ValueError:
        return "a URI (its value is not shown: it does not parse)"
    if not parts.scheme or "@" in parts.path or has_credentials(parts.path):
        return "a URI (its value is not shown)"
    host = f"[{host}]" if ":" in host else host
    hidden = " (its user information, query and fragment are not shown)" if (
        "@" in parts.netloc or parts.query or parts.fragment or "?" in uri or "#" in uri) else ""
    return f"{parts.scheme}://{host}{port}{parts.path}".__repr__() + hidden
