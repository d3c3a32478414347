"""Every stack key, given a value shaped like a credential, is either accepted or refused without the credential in the
refusal or in any warning: the whole program under the Pulumi mocks, so whichever check refuses (config.load's, or
the preview's against the model, the data and EC2) the refusal leaves through the one masking rule
(infra/config/schema.py hides_secret_values and warn, workload/config/secret_text.py masked). Two shapes: a vendor's
(Tavily's tvly-, in fields.TOKEN_VALUE) and one no rule names (only the generic rule catches it), in other values
than the audits'."""
from __future__ import annotations

import pulumi
import pytest

from infra.config.schema import schema
from tests.support.pulumi_mocks import _run

HIDDEN = "Rw4Jx9Lm2Tq"
TOKENS = {
    "vendor": f"tvly-{HIDDEN}{HIDDEN}Kp",
    "unlisted": f"qz_key_{HIDDEN}Zk7{HIDDEN}",
    "uri": f"https://ops:{HIDDEN}@mirror.example.com/models",
}
# What a key needs beside it for its own check to run: the job's keys are read only with the job on.
JOB = {"trainEnabled": True, "trainStoragePath": "s3://team-bucket/runs"}


def _value(key: str, token: str):
    kind = schema()[key].get("type")
    if kind == "array":
        return [f"BUILD_LABEL={token}"] if key in ("trainEnv", "trainSecretEnv") else [token]
    return token


def _outcome(overrides: dict, monkeypatch) -> tuple[str, str]:
    """The program's refusal ('' when it accepted) and everything it logged."""
    logged: list[str] = []
    for level in ("debug", "info", "warn", "error"):
        monkeypatch.setattr(pulumi.log, level, lambda message, *args, **kwargs: logged.append(str(message)))
    run = _run("dev", overrides)
    return ("" if run.error is None else str(run.error)), "\n".join(logged)


@pytest.mark.parametrize("shape", sorted(TOKENS))
def test_no_stack_key_echoes_a_credential(shape, monkeypatch):
    token = TOKENS[shape]
    refused = []
    for key in sorted(schema()):
        overrides = {**(JOB if key.startswith("train") else {}), key: _value(key, token)}
        message, logged = _outcome(overrides, monkeypatch)
        assert HIDDEN not in message, f"{key}: the refusal echoes the {shape} token: {message[:300]}"
        assert HIDDEN not in logged, f"{key}: a warning echoes the {shape} token"
        if message:
            refused.append(key)
    # the walk reached the checks: most keys refuse such a value, each naming itself as before
    assert len(refused) > len(schema()) // 2, refused


def test_a_lora_target_no_rule_names_is_refused_unquoted(monkeypatch):
    """The preview's check against the model (trainLoraTargets: 'the model has no linear layer named ...') quotes the
    item it does not know; an item shaped like a token of no listed vendor is masked there too."""
    item = f"Pq8{HIDDEN}Vz3{HIDDEN}"
    message, _ = _outcome({**JOB, "trainMethod": "lora", "trainLoraTargets": f"q_proj,{item}"}, monkeypatch)
    assert "trainLoraTargets" in message and HIDDEN not in message, message
