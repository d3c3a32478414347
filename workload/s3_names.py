"""S3's rules for general purpose bucket names (Amazon S3 User Guide, "General purpose bucket naming rules"), the one
copy the rule of every s3:// location (workload/config/s3_uri.py: the stack's keys, the flags, the commands'
arguments) follows: a name S3 can never have is refused as bad input before any credentials are asked for. Standard
library only."""
from __future__ import annotations

import re

# 3-63 lowercase letters, digits, dots and hyphens, starting and ending with a letter or digit. Anything else (a
# wildcard above all) is not one bucket. Applied with fullmatch: `re.match` with `$` would take a trailing newline.
S3_BUCKET = re.compile(r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")
# Names S3 keeps for itself or for aliases of other things, which no bucket can have.
S3_BUCKET_RESERVED_PREFIXES = ("xn--", "sthree-", "amzn-s3-demo-")
S3_BUCKET_RESERVED_SUFFIXES = ("-s3alias", "--ol-s3", ".mrap", "--x-s3", "--table-s3")
_IPV4_LIKE = re.compile(r"[0-9]+\.[0-9]+\.[0-9]+\.[0-9]+")
BUCKET_ALLOWED = "3-63 lowercase letters, digits, '.' and '-' (no '..'), like s3://my-bucket/prefix"


def bucket_name_problem(bucket: str) -> str | None:
    """Which of S3's naming rules `bucket` breaks beyond S3_BUCKET's characters, or None."""
    if _IPV4_LIKE.fullmatch(bucket):
        return "it is formatted as an IP address"
    if prefix := next((p for p in S3_BUCKET_RESERVED_PREFIXES if bucket.startswith(p)), None):
        return f"the prefix {prefix!r} is reserved"
    if suffix := next((p for p in S3_BUCKET_RESERVED_SUFFIXES if bucket.endswith(p)), None):
        return f"the suffix {suffix!r} is reserved for access point, Multi-Region or directory bucket names"
    return None


def bucket_problem(bucket: str) -> str | None:
    """Why no S3 bucket can be named `bucket` (its characters, '..', or a reserved name), or None."""
    if not S3_BUCKET.fullmatch(bucket) or ".." in bucket:
        return f"a bucket name has {BUCKET_ALLOWED}"
    return bucket_name_problem(bucket)


# An object's https:// address as S3 serves it (Amazon S3 User Guide, "Virtual hosting of buckets" and "Path-style
# requests"): BUCKET.s3[.-]REGION.amazonaws.com/KEY, BUCKET.s3.amazonaws.com/KEY (also .dualstack.), and the path style
# s3[.-]REGION.amazonaws.com/BUCKET/KEY. The console's "Object URL" is the first; users paste it where s3:// goes.
_VIRTUAL_HOSTED = re.compile(r"https?://(?P<bucket>[a-z0-9][a-z0-9.-]*?)\.s3(?:[.-](?:dualstack\.)?[a-z0-9-]+)?"
                             r"\.amazonaws\.com(?:\.cn)?(?:/(?P<key>[^?#]*))?(?:[?#].*)?")
_PATH_STYLE = re.compile(r"https?://s3(?:[.-](?:dualstack\.)?[a-z0-9-]+)?\.amazonaws\.com(?:\.cn)?"
                         r"/(?P<bucket>[a-z0-9][a-z0-9.-]*)(?:/(?P<key>[^?#]*))?(?:[?#].*)?")


def s3_uri_of(address: str) -> str | None:
    """The s3:// URI of an S3 web address (https://bucket.s3.amazonaws.com/key, path style too), else None."""
    match = _VIRTUAL_HOSTED.fullmatch(address) or _PATH_STYLE.fullmatch(address)
    if match is None or bucket_problem(match["bucket"]) is not None:
        return None
    return f"s3://{match['bucket']}/{match['key'] or ''}"


def s3_hint(address: str) -> str:
    """'; did you mean s3://...?' for an S3 web address, else '' (also for one whose key may hold a token: a run of
    40 letters and digits is not repeated)."""
    uri = s3_uri_of(address)
    shown = uri is not None and len(uri) <= 200 and not re.search(r"[A-Za-z0-9_-]{40,}", uri)
    return f"; did you mean {uri}?" if shown else ""
