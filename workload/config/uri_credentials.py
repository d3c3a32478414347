"""Credentials in URIs, and how a refusal may quote a URI. One rule each: a URI holds credentials when its authority
has user information (scheme://user[:password]@host) or a query or fragment parameter is named like a credential
(?token=, ?Authorization=, &X-Amz-Signature=, #access_token=); and a refusal quotes a URI as scheme://host/path only
(`shown_uri`), never its user information, query or fragment, whatever made it refuse.

Linear in the value's length: the value is split on whitespace, each word at its '://' and at its parameters'
separators, with no backtracking pattern (a regex over `scheme://...[?&]name=` took seconds on 32,768 letters).

Standard library only: the Pulumi program imports it at preview.
"""
from __future__ import annotations

from urllib.parse import unquote, urlsplit

_SCHEME_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789+.-")
# A parameter's name says it holds a credential when one of its words (the name in lower case, split at '_', '-' and
# '.') is one, ends like one or begins like one: a token (access_token, id_token, X-Amz-Security-Token), a password
# (pwd, passwd, userPwd), a secret (client_secret), a signature (a presigned URL's X-Amz-Signature, Azure's sig), an
# authorization (auth, Authorization), a credential, a session, an API or access key (apiKey). Words, not substrings:
# tokenizer, author and monkey are no credential.
_CREDENTIAL_WORDS = frozenset({"key", "sig", "pass", "pw", "sid", "auth", "session", "token", "secret"})
_CREDENTIAL_ENDINGS = ("token", "tokens", "secret", "password", "passwd", "pwd", "credential", "credentials",
                       "signature", "apikey", "accesskey", "privatekey", "secretkey", "sessionid", "auth",
                       "authorization")
_CREDENTIAL_BEGINNINGS = ("authoriz", "password", "passwd", "secret", "credential", "signature", "session")
_PARAMETER_SEPARATORS = str.maketrans({"?": "&", ";": "&", "#": "&"})
_WORD_SEPARATORS = str.maketrans({"-": "_", ".": "_"})


def credential_parameter(name: str) -> bool:
    """Whether a query or fragment parameter named `name` holds a credential (token, Authorization, pwd, sig...)."""
    words = unquote(name).lower().translate(_WORD_SEPARATORS).split("_")  # to%6Ben is token to every server
    return any(word in _CREDENTIAL_WORDS or word.endswith(_CREDENTIAL_ENDINGS)
               or word.startswith(_CREDENTIAL_BEGINNINGS) for word in words)


def _before(text: str, stops: str) -> str:
    """`text` up to its first character of `stops` (each find reads `text` at most once)."""
    return text[:min((found for stop in stops if (found := text.find(stop)) != -1), default=len(text))]


def _word_has_credentials(word: str) -> bool:
    """Whether one whitespace-free word holds a URI with credentials. The word is split at each '://' once: each
    piece after a scheme starts an authority, which ends at the piece's first '/', '?' or '#'; the query and fragment
    start at the first '?', ';' or '#' after the first scheme, and split at '&', ';', '?' and '#' into parameters."""
    pieces = word.split("://")
    authorities = [_before(piece, "/?#") for before, piece in zip(pieces, pieces[1:])
                   if before and before[-1] in _SCHEME_CHARS]
    if not authorities:
        return False
    if any("@" in authority for authority in authorities):
        return True
    tail = word[word.find("://") + 3:]
    cut = len(_before(tail, "?#;"))
    parameters = tail[cut:].translate(_PARAMETER_SEPARATORS).split("&")
    return any(credential_parameter(item.partition("=")[0]) for item in parameters if "=" in item)


def has_credentials(value: str) -> bool:
    """Whether `value` holds, anywhere, a URI with user information (scheme://user[:password]@...) or a parameter
    named like a credential in its query or fragment (?token=..., #access_token=...)."""
    # A scheme-relative URI (//user:secret@host/db, which clients resolve against their own scheme; also after '='
    # as in DSN=//user:secret@host) read as a URI: each '//' not after ':' is given a scheme.
    words = [_with_scheme(word) for word in value.split() if "//" in word]
    return any(_word_has_credentials(word) for word in words if "://" in word)


def _with_scheme(word: str) -> str:
    """`word` with 'x:' before each '//' that no ':' precedes (one pass over the word's pieces)."""
    pieces = word.split("//")
    return pieces[0] + "".join(("//" if before.endswith(":") else "x://") + piece
                               for before, piece in zip(pieces, pieces[1:]))


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
