"""workload/config/fields.py TOKEN_VALUE: the shapes of well-known access tokens (GitHub's secret scanning patterns'
prefixes, a JWT) found in any free-text value, and the ordinary words beside them left alone."""
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
