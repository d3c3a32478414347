"""An s3:// location as S3 and pyarrow take it: the one rule of every setting that names one, applied before any
credentials are read or any request is made. The stack's keys (infra/config/rules.py s3_location: trainStoragePath,
trainDataset, trainModelId, trainTokenizer), their flags wherever a TrainConfig is made (`workload.local`,
`workload.train`, `tools.job submit`, a --config file; --run_name too, a directory under an s3:// --storage_path),
`workload.export`'s CHECKPOINT and `tools.loss_curve`'s RUN, and the s3:// locations asked of AWS
(workload/s3_access.py). Standard library only: the Pulumi program imports it.
"""
from __future__ import annotations

import re
from typing import Any, Mapping
from urllib.parse import unquote

from workload.config.fields import shown_value
from workload.s3_names import bucket_problem

# The flags that take an s3:// location; infra/config/rules.py S3_URI_SETTINGS maps each to its stack key.
S3_URI_FLAGS = ("storage_path", "dataset", "model_id", "tokenizer")
# S3's object key naming guidelines (Amazon S3 User Guide, "Naming Amazon S3 objects"): its safe characters (letters,
# digits, '!-_.*'()') and '/', plus '=' for hive-style partitions (date=2024-01-01). The others "might require special
# handling" or are "to avoid" (space, '&', '@', ':', '+', ',', ';', '\\', '{', '^', '%', '`', '[', '"', '<', '#', '|',
# control and non-ASCII characters). pyarrow refuses many of them outright: FileSystem.from_uri parses the URI with
# uriparser's RFC 3986 grammar (arrow/util/uri.cc Uri::Parse: "Cannot parse URI" for a space, '[', '{', '|', '^', '\\',
# '`', '"', '<', a tab, a non-ASCII byte, a '%' not followed by two hex digits), and S3Options::FromUri
# (arrow/filesystem/s3fs.cc) takes the query for its own options ("Unexpected query parameter in S3 URI":
# ?versionId=...) and drops the fragment ('#'). IAM's policy matching and the job's argument quoting read others
# differently again. Applied with fullmatch.
S3_KEY_CHARACTERS = re.compile(r"[A-Za-z0-9!_.*'()/=-]*")
# A percent-escape: pyarrow's S3 file system decodes s3:// URIs (%2e%2e is '..'), while S3 and IAM take the literal
# text, so a path with one means one place to the grant and another to the job.
PERCENT_ESCAPE = re.compile(r"%[0-9A-Fa-f]{2}")
KEY_ALLOWED = "allowed: s3://BUCKET/KEY, KEY of letters, digits, '/' and !-_.'()= (S3's safe key characters)"


def segments_problem(inner: str) -> str | None:
    """Why the path `inner` (without its leading and trailing '/') has an empty, '.' or '..' segment, or None: a file
    system or an S3 client that normalises them reads or writes elsewhere than the prefix granted (and S3 keeps them
    literally, so the same path means two places)."""
    if inner and any(segment in ("", ".", "..") for segment in inner.split("/")):
        return "has an empty, '.' or '..' path segment; allowed: a path without '//', '/./' or '/../'"
    return None


def s3_uri_problem(uri: str) -> str | None:
    """Why the s3:// location `uri` is none that S3, pyarrow and IAM all read as written, or None (also for a value
    that is no s3:// URI: each setting's own checks say what else it takes). The reason never quotes the URI whole:
    the caller names the setting and shows the URI (refusal)."""
    if not uri.startswith("s3://"):
        return None
    bucket, _, key = uri.removeprefix("s3://").partition("/")
    if not bucket:
        return "an s3:// location names its bucket; allowed: s3://BUCKET/KEY"
    if (problem := bucket_problem(bucket)) is not None:
        return (f"no S3 bucket can be named {shown_value(bucket)}: {problem}; allowed: s3://BUCKET/KEY, BUCKET as "
                "S3's bucket naming rules allow")
    if (problem := segments_problem(unquote(key).removesuffix("/"))) is not None:
        return problem
    if PERCENT_ESCAPE.search(key):
        return ("holds a percent-escape, which pyarrow's S3 file system decodes while S3 and IAM take the literal "
                "text; allowed: the path written out, without '%XX'")
    if wild := sorted(set("*?$") & set(key)):
        return (f"the path after the bucket holds {', '.join(map(repr, wild))} (pyarrow reads '?' as the start of its "
                f"options, IAM '*' and '$' as a wildcard or a policy variable); {KEY_ALLOWED}")
    if odd := sorted(set(S3_KEY_CHARACTERS.sub("", key))):
        return (f"the path after the bucket holds {', '.join(repr(c) for c in odd[:5])}, which pyarrow's S3 file "
                f"system, IAM and the job's arguments read differently; {KEY_ALLOWED}")
    return None


def refusal(name: str, uri: str) -> str | None:
    """The refusal of `uri` given as `name` (a flag, `--dataset`, or an argument as its command's help names it,
    `CHECKPOINT`), the URI shown as every refusal shows a value (fields.shown_value: never a token), or None."""
    problem = s3_uri_problem(uri)
    return None if problem is None else f"{name} {shown_value(uri)}: {problem}"


def check_flags(values: Mapping[str, Any]) -> None:
    """ValueError for the first of a run's s3:// flags (S3_URI_FLAGS, of `values`: a TrainConfig's fields) that S3 or
    pyarrow cannot take, and for the run's directory under an s3:// --storage_path (--run_name joins it): before any
    credentials are read or a request is sent."""
    storage_path = str(values["storage_path"])
    run_directory = f"{storage_path.rstrip('/')}/{values['run_name']}" if storage_path.startswith("s3://") else ""
    for name, value in [*((f"--{key}", str(values[key])) for key in S3_URI_FLAGS), ("--run_name", run_directory)]:
        if (refused := refusal(name, value)) is not None:
            raise ValueError(refused)
