"""Credentials in URIs (workload/config/uri_credentials.py): one rule for user information and for query or fragment
parameters named like a credential, one way every refusal quotes a URI (scheme://host/path only), and a check that
reads a long value once (split, not a backtracking pattern)."""
from __future__ import annotations

import pytest

from infra.config.experiment_tracking import tracking_uri_problem
from workload.config import uri_credentials
from workload.config.fields import shown_uri, text_problem
from workload.config.uri_credentials import credential_parameter, has_credentials

SECRET = "PLACEHOLDERc4Lm28"

CREDENTIAL_URIS = [
    f"//ops:{SECRET}@cache.example.net/0",  # scheme-relative: clients take it with their own scheme
    f"https://tracking.example.org/?api%5Fkey={SECRET}",  # a parameter name percent-encoded
    f"https://tracking.example.org/run?client_secret={SECRET}",
    f"https://tracking.example.org/#id_token={SECRET}",
    f"https://tracking.example.org/#/view?sig={SECRET}",
    f"https://tracking.example.org/a;userPwd={SECRET}",
    f"https://tracking.example.org/a?x=1&X-Goog-Credential={SECRET}",
    f"https://tracking.example.org/?SessionKey={SECRET}",
    f"https://tracking.example.org/?apiKey={SECRET}",
    f"https://tracking.example.org/?Bearer-Auth={SECRET}",
    f"https://tracking.example.org/?Proxy-Authorization={SECRET}",
    f"gs://bucket/o?X-Goog-Signature={SECRET}",
    f"note: see ftp://{SECRET}@files.example.org/x",
    f"HTTP://tracking.example.org:9443/?LDAP_PASSWD={SECRET}",
]
ORDINARY = [
    "https://tracking.example.org/team?page=2&sort=desc#results",
    "https://tracking.example.org/?tokenizer=bpe&author=me&monkey=1",
    "s3://bucket/dir@v2/file.jsonl",
    "user@example.org wrote s3://bucket/a",
    "a://b://c://d",
    "",
]


@pytest.mark.parametrize("uri", CREDENTIAL_URIS)
def test_a_parameter_or_user_information_named_like_a_credential_is_one(uri):
    assert has_credentials(uri)
    message = text_problem(uri, 2048)
    assert message is not None and SECRET not in message


@pytest.mark.parametrize("value", ORDINARY)
def test_ordinary_parameters_paths_and_addresses_are_not(value):
    assert not has_credentials(value)


def test_parameter_names_are_read_by_word():
    assert all(map(credential_parameter, ("refresh_token", "X-Amz-Security-Token", "db.password", "sv_sig", "key")))
    assert not any(map(credential_parameter, ("tokenizer", "author", "keyboard", "design", "page", "monkey")))


@pytest.mark.parametrize("uri, shown", [
    (f"https://me:{SECRET}@tracking.example.org:8080/a/b?q={SECRET}#{SECRET}", "'https://tracking.example.org:8080/a/b'"),
    (f"https://tracking.example.org/x#frag={SECRET}", "'https://tracking.example.org/x'"),
    ("https://tracking.example.org/plain", "'https://tracking.example.org/plain'"),
    (f"https://[fd00::5]/p?k={SECRET}", "'https://[fd00::5]/p'"),
])
def test_a_refusal_quotes_scheme_host_and_path_only(uri, shown):
    assert shown_uri(uri).startswith(shown) and SECRET not in shown_uri(uri)


@pytest.mark.parametrize("uri", [f"https://tracking.example.org/ghp_{SECRET}{'Z' * 24}", f"https://h.example:99999/{SECRET}",
                                 f"https://h.example/a@{SECRET}"])
def test_a_uri_whose_path_or_port_could_hold_a_secret_is_not_quoted(uri):
    assert SECRET not in shown_uri(uri)


@pytest.mark.parametrize("uri", [
    f"https://tracking.example.org:8443/?passwd={SECRET}",
    f"https://tracking.example.org/api#session={SECRET}",
    f"https://u:{SECRET}@tracking.example.org/",
    f"http://tracking.example.org/?Signature={SECRET}",
])
def test_the_tracking_uri_refusal_never_repeats_a_credential(uri):
    message = tracking_uri_problem(uri, None)
    assert message is not None and SECRET not in message


@pytest.mark.parametrize("value, expected", [
    ("b" * 32768, False),
    ("https://" + "b" * 32760, False),
    ("z://" * 8192, False),
    ("https://h.example/?" + "&b=c" * 8190, False),
    ("https://h.example/?" + "&b=c" * 8180 + "&auth=1", True),
    ("s3://b/" + "b" * 32750 + "?X-Amz-Signature=1", True),
    ("https://" + "b" * 32750 + "@h.example/", True),
])
def test_values_at_the_length_bound_are_answered(value, expected):
    # Timings (not asserted): 32,768 letters took has_credentials' former regexes ~22-25 s on the dev machine; this
    # module answers in ~0.03 ms, and text_problem on the whole value in ~7 ms.
    assert has_credentials(value) is expected


def test_the_check_uses_no_pattern_that_could_backtrack():
    assert not hasattr(uri_credentials, "re"), "split and find read a value once; a regex over 'scheme://...' did not"
