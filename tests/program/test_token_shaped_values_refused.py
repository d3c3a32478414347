"""Values shaped like a vendor's token (workload/config/fields.py TOKEN_VALUE) refused at preview in whichever free-text
key they sit, naming the key and never quoting the value; and every refusal of a key that quotes its value quotes it
through fields.shown_value, so a long or token-shaped value is named by its length only."""
from __future__ import annotations

import pytest

from tests.program.test_refusals_at_preview import refusal

HIDDEN = "Mq4Rt8Vy2Kx6"
HEX40 = "9a8b7c6d5e4f" * 3 + "0a1b"
# One of each vendor's shapes, in other values than the audits'.
SHAPES = [
    f"pul-{HEX40}",
    f"nvapi-{HIDDEN}{HIDDEN}-{HIDDEN}_{HIDDEN}{HIDDEN}",
    f"hvs.{HIDDEN * 8}",
    "api_org_" + "ZyXwVuTsRqPoNmLkJiHgFeDcBaZyXwVuTs",
    f"lin_api_{HIDDEN * 3}wxyz",
    f"ATATT3xFfGF0{HIDDEN * 5}=C0FFEE12",
    f"pscale_pw_{HIDDEN * 3}.Zz-9",  # PlanetScale's (gitleaks' planetscale-password, -api-token, -oauth-token)
    f"pscale_oauth_{HIDDEN * 4}",
    f"pscale_tkn_{HIDDEN}_{HIDDEN}={HIDDEN}",
]


@pytest.mark.parametrize("token", SHAPES)
@pytest.mark.parametrize("key, overrides", [
    ("trainEnv", lambda token: {"trainEnv": [f"BUILD_LABEL=prefix-{token}"]}),
    ("trainWandbProject", lambda token: {"trainReportTo": "wandb", "trainWandbProject": token,
                                         "trainSecretEnv": [f"WANDB_API_KEY={'f' * 40}"]}),
    ("trainRunId", lambda token: {"trainEnabled": True, "trainStoragePath": "s3://team-bucket/runs",
                                  "trainRunId": token}),
])
def test_a_vendor_token_in_a_free_text_key_is_refused_unquoted(key, overrides, token):
    message = refusal(overrides(token))
    assert f"'{key}'" in message, f"{key}: the refusal names the key: {message}"
    assert token not in message and HIDDEN not in message and HEX40 not in message, f"{key}: echoed: {message}"


@pytest.mark.parametrize("key, value, overrides", [
    # each over fields.SHOWN_VALUE_CHARS (100) but within the key's text bound, so the key's own rule refuses it
    ("trainRunId", "r" * 150, {"trainEnabled": True, "trainStoragePath": "s3://team-bucket/runs"}),
    ("clusterName", "c" * 140, {}),
    ("kubernetesVersion", "1." + "3" * 120, {}),
    ("vpcCidr", "10.0.0.0/" + "1" * 110, {}),
    ("capacityReservationId", "cr-" + "0" * 130, {}),
    ("trainStoragePath", "s3://Team_Bucket/" + "p" * 120, {}),
])
def test_a_key_refusal_quotes_a_long_value_by_its_length(key, value, overrides):
    message = refusal({**overrides, key: value})
    assert f"'{key}'" in message and f"a value of {len(value):,} characters (not shown)" in message, message
    assert value not in message and value[:60] not in message, f"{key}: echoed: {message}"


def test_a_short_mistyped_value_is_still_quoted():
    message = refusal({"trainEnabled": True, "trainStoragePath": "s3://team-bucket/runs", "trainRunId": "run 7"})
    assert "'run 7'" in message, f"a short mistake is shown as typed: {message}"
