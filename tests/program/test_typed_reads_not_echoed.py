"""A token pasted into a typed stack key (an integer, a decimal, a boolean) is refused naming the key and never
echoed: every "not a number / not an integer / not a boolean" refusal quotes the value by the one rule
(workload/config/fields.py shown_choice, in Declaration.from_stack and in infra/config/schema.py's typed reads)."""
from __future__ import annotations

import pytest

from tests.program.test_refusals_at_preview import program_refusal
from workload.config import DECLARED
from workload.config.fields import looks_like_token

BODY = "Wq7Ze3Lp9Hs5Nd1Bv8Cx4Mf6"
TOKENS = [f"pscale_pw_{BODY}{BODY[:12]}", f"pscale_oauth_{BODY}{BODY}", "Xr5" + BODY + "Kt2Jy8Gh0Pu4"]
TYPED_KEYS = sorted({declared.stack_key for declared in DECLARED if declared.stack_key
                     and declared.type.split(" | ")[0] in ("int", "float", "bool")} | {"trainTimeoutMinutes",
                                                                                         "trainEnabled"})


def test_planetscale_tokens_are_token_shaped_and_short_words_are_not():
    assert all(looks_like_token(token) for token in TOKENS[:2])
    assert looks_like_token(f"DATABASE_PASSWORD=pscale_tkn_{BODY}{BODY}.x=y")
    assert not looks_like_token("pscale_tkn_short") and not looks_like_token("pscale_pw_")


@pytest.mark.parametrize("token", TOKENS, ids=["pscale_pw", "pscale_oauth", "no-prefix"])
@pytest.mark.parametrize("key", TYPED_KEYS)
def test_a_token_in_a_typed_key_is_refused_unquoted(key, token):
    message = program_refusal({"trainEnabled": True, key: token})
    assert f"'{key}'" in message, f"{key}: the refusal names the key: {message}"
    assert token not in message and BODY not in message and BODY[:10] not in message, f"{key}: echoed: {message}"


def test_a_short_mistyped_number_is_still_quoted():
    message = program_refusal({"trainEnabled": True, "trainEvalFraction": "ten %"})
    assert "config key 'trainEvalFraction': 'ten %' is not a number" in message, message
