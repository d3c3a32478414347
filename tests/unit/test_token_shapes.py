"""workload/config/fields.py TOKEN_VALUE: the shapes of well-known access tokens (GitHub's secret scanning patterns'
prefixes, a JWT, vendors' documented prefixes) found in any free-text value, and the ordinary words beside them left
alone."""
from __future__ import annotations

import pytest

from workload.config.fields import looks_like_token, text_problem

HIDDEN = "Zq7Xv3Lw9Pn2"


@pytest.mark.parametrize("value", [
    # a JWT: header {"alg":"ES256"}, a payload, a signature
    f"eyJhbGciOiJFUzI1NiJ9.eyJhdWQiOiJ{HIDDEN}fQ.U2lnbmF0dXJlQnl0ZXNIZXJl",
    f"token is glpat-{HIDDEN}{HIDDEN}",
    f"gldt-{HIDDEN}{HIDDEN}",
    f"xoxp-2345678901-2345678901-{HIDDEN}",
    f"xapp xoxe-1-{HIDDEN}",
    f"rk_live_{HIDDEN}{HIDDEN}",
    f"sk_live_{HIDDEN}{HIDDEN}",
    f"npm_{HIDDEN}{HIDDEN}{HIDDEN}",
    f"ghs_{HIDDEN}{HIDDEN}",
    f"gho_{HIDDEN}{HIDDEN}",
    f"AIzaSy{HIDDEN}{HIDDEN}{HIDDEN}a",
    f"pypi-AgEIcHlwaS5vcmc{HIDDEN * 4}",
])
def test_well_known_token_shapes_are_tokens(value):
    assert looks_like_token(value), value
    problem = text_problem(value, 1000)
    assert problem is not None and "glpat-" in problem and HIDDEN not in problem, problem


@pytest.mark.parametrize("value", [
    "xoxo-and-many-hugs-to-everyone", "npm_config_cache", "sk_learn_pipeline", "eyJ.a.b", "model.safetensors.index.json",
    "glpat-short", "header.payload.signature", "pypi-mirror",
])
def test_ordinary_words_are_not(value):
    assert not looks_like_token(value), value


# Vendors' documented prefixes, each value other than the audits' (pul- and 40 hex, nvapi-, hvs./hvb., api_org_ and 34
# letters, lin_api_ and 40, ATATT3..., sk_test_, xapp-N-..., AGE-SECRET-KEY-1, PMAK-).
HEX = "0f1e2d3c4b5a69788796"


@pytest.mark.parametrize("value", [
    f"pul-{HEX}{HEX}",
    f"NGC_LOGIN nvapi-{HIDDEN}_{HIDDEN}-{HIDDEN}{HIDDEN}",
    f"hvs.{HIDDEN}{HIDDEN}{HIDDEN}",
    f"hvb.{HIDDEN}-{HIDDEN}_{HIDDEN}",
    "api_org_" + "QwErTyUiOpAsDfGhJkLzXcVbNmQwErTyUi",
    f"lin_api_{HIDDEN}{HIDDEN}{HIDDEN}abcd",
    f"ATATT3xFfGF0{HIDDEN}{HIDDEN}{HIDDEN}{HIDDEN}=0A1B2C3D",
    f"sk_test_{HIDDEN}{HIDDEN}",
    f"rk_prod_{HIDDEN}",
    f"xapp-2-B0987ZYXW65-9876543210987-{HEX}{HEX}",
    "AGE-SECRET-KEY-1" + ("QPZRY9X8GF2TVDW0S3JN54KHCE6MUA7L" * 2)[:58],
    f"PMAK-{HEX}{HEX[:4]}-{HEX}{HEX[:14]}",
])
def test_vendor_prefixed_tokens_are_tokens(value):
    assert looks_like_token(value), value
    problem = text_problem(value, 1000)
    assert problem is not None and HIDDEN not in problem and HEX not in problem, problem


@pytest.mark.parametrize("value", [
    "pul-requests", "pulumi-dev-stack", "nvapi-docs", "hvs.cluster.local", "api_org_settings", "lin_api_client",
    "ATATT3-release", "sk_test_run", "xapp-1-beta", "AGE-SECRET-KEY-1-rotation", "PMAK-notes", "hvr.v2",
])
def test_vendor_prefixes_alone_are_not(value):
    assert not looks_like_token(value), value


@pytest.mark.parametrize("argv, flag", [
    (["--instance-type", f"lin_api_{HIDDEN}{HIDDEN}{HIDDEN}abcd", "--count", "2"], "--instance-type"),
    (["--instance-type", "g6e.12xlarge", "--count", "2", "--write-stack", f"team/hvs.{HIDDEN}{HIDDEN}"],
     "--write-stack"),
    (["--stack", f"acme/pul-{HEX}{HEX}/dev", "--instance-type", "g6e.12xlarge", "--count", "2"], "--stack"),
])
def test_a_tools_refusal_of_a_token_shaped_flag_does_not_quote_it(capsys, argv, flag):
    """tools.capacity's refusals quote a flag's value through cli.shown, and --stack's through shown_stack."""
    import tools.capacity.cli as capacity_cli
    from workload import cli

    try:
        code = cli.run(capacity_cli.main, argv)
    except SystemExit as exited:  # argparse's own refusal of a flag's type (--stack)
        code = exited.code
    err = capsys.readouterr().err
    assert code == cli.USAGE and flag in err and HIDDEN not in err and HEX not in err, err
