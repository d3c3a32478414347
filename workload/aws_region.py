"""The form of an AWS region's name, checked before anything asks AWS (a typo otherwise reads as "no credentials"
or "could not connect to the endpoint URL")."""
from __future__ import annotations

import difflib
import re

# AWS's region names: a two-letter area, one or more words, a number (us-east-1, us-gov-west-1, ap-southeast-7,
# cn-north-1; botocore's data/endpoints.json lists them per partition).
REGION_NAME = re.compile(r"[a-z]{2}(-[a-z]+)+-\d+")


def known_regions() -> list[str]:
    """The regions of every partition this botocore knows (read from its own files, no request)."""
    import boto3

    session = boto3.session.Session()
    return sorted({region for partition in session.get_available_partitions()
                   for region in session.get_available_regions("ec2", partition_name=partition)})


def region_problem(name: str) -> str | None:
    """Why `name` is no region's name (with the nearest known one), or None for a name of a region's form."""
    if REGION_NAME.fullmatch(name):
        return None
    if len(name) > REGION_SHOWN_CHARS or not name.isprintable():  # a region's name is about 15 characters
        return (f"a value of {len(name):,} characters (not shown) is not an AWS region's name; a region name is such as "
                "us-east-1 or eu-west-2")
    nearest = difflib.get_close_matches(name.strip().lower(), known_regions(), n=1, cutoff=0.75)
    hint = f"did you mean {nearest[0]}?" if nearest else "a region name is such as us-east-1 or eu-west-2"
    return f"{name!r} is not an AWS region's name; {hint}"


# The longest value a refusal repeats as a mistyped region (the longest region name, ap-southeast-5 or
# us-gov-west-1's kind, is under 20 characters).
REGION_SHOWN_CHARS = 32
