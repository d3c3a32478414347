"""--profile checked against the AWS config files before boto3 loads: a profile no file defines (a typo, a token pasted
in its place) was refused only when boto3 made its session, a second after the command began. The names are read as
botocore reads them (botocore/session.py Session.full_config, botocore/configloader.py raw_config_parse and
build_profile_map): the config file (AWS_CONFIG_FILE, default ~/.aws/config) defines `[default]` and
`[profile NAME]`, the credentials file (AWS_SHARED_CREDENTIALS_FILE, default ~/.aws/credentials) every section."""
from __future__ import annotations

import argparse
import configparser
import os
import shlex

from workload import cli

# (environment variable, botocore's default, whether its sections read `profile NAME`): botocore/configprovider.py.
FILES = (("AWS_CONFIG_FILE", "~/.aws/config", True), ("AWS_SHARED_CREDENTIALS_FILE", "~/.aws/credentials", False))
LISTED = 8  # the most profile names a refusal lists


def profile_names() -> set[str] | None:
    """The profiles the AWS config files define; None when a file cannot be parsed (boto3 then says what is wrong)."""
    names: set[str] = set()
    for variable, default, prefixed in FILES:
        path = os.path.expanduser(os.path.expandvars(os.environ[variable] if variable in os.environ else default))
        if not os.path.isfile(path):  # botocore: ConfigNotFound, no profiles from this file
            continue
        parser = configparser.RawConfigParser()
        try:
            parser.read([path])
        except (configparser.Error, UnicodeDecodeError, OSError):
            return None
        for section in parser.sections():
            if not prefixed or section == "default":
                names.add(section)
            elif section.startswith("profile"):
                try:
                    parts = shlex.split(section)
                except ValueError:
                    continue
                if len(parts) == 2:
                    names.add(parts[1])
    return names


def aws_profile(value: str) -> str:
    """argparse's type for --profile: a name (cli.named) that the AWS config files define."""
    value = cli.named(value)
    names = profile_names()
    if names is None or value in names:
        return value
    plain = sorted(name for name in names if cli.shown(name) == repr(name))  # a name that may be a token: unlisted
    listed = ", ".join(plain[:LISTED]) + (", ..." if len(names) > min(len(plain), LISTED) else "") if names else "none"
    raise argparse.ArgumentTypeError(f"{cli.shown(value)}: no such AWS profile in the AWS config files (theirs: "
                                     f"{listed}; `aws configure list-profiles`)")
