"""trainEnv's entries at preview (infra/config/env_names.py, infra/config/train_keys.py), one rule a class: a name that
says it holds a credential goes in trainSecretEnv; a value that refers to another variable ($NAME, ${NAME}: Ray's
runtime_env expands them) is refused naming its entry; a name that loads code, runs a repository's code or writes
the TLS keys is reserved, with its reason. Each refusal names the key and never repeats the value."""
from __future__ import annotations

import pytest

from infra import config
from infra.config.env_names import holds_credential, refers_to_variable, reserved_reason
from tests.program.test_refusals_at_preview import DEV

SECRET = "PLACEHOLDERv8Qw31"


def refusal(env: list[str], **overrides) -> str:
    with pytest.raises(ValueError) as refused:
        config.parse(DEV | {"trainEnv": env, **overrides})
    message = str(refused.value)
    assert "'trainEnv'" in message and SECRET not in message and "\n" not in message, message
    return message


@pytest.mark.parametrize("name", ["REDIS_PASS", "LDAP_PASSWD", "SMTP_PW", "DBPASSWORD", "GITHUB_TOKEN",
                                  "SIGNING_PRIVATE_KEY", "SERVICE_CREDENTIALS", "VAULT_SECRET_ID", "MYAPIKEY",
                                  "proxy_auth", "Db_Password_File", "BLOB_STORE_KEY", "FORGE_PAT",
                                  "QUEUE_CONNECTION_STRING", "GPG_PASSPHRASE"])
def test_a_name_that_holds_a_credential_goes_in_trainsecretenv(name):
    message = refusal([f"{name}={SECRET}"])
    assert name in message and "put it in trainSecretEnv" in message


@pytest.mark.parametrize("name", ["TOKENIZERS_PARALLELISM", "MAX_TOKENS", "PWD", "OLDPWD", "COMPASS", "KEYBOARD",
                                  "HF_HUB_DISABLE_IMPLICIT_TOKEN", "PASSPORT_OFFICE",
                                  "KEYSPACE", "PATCH_LEVEL"])
def test_names_that_only_look_alike_are_not_credentials(name):
    assert not holds_credential(name)


@pytest.mark.parametrize("value", ["${WANDB_API_KEY}", "team-${MLFLOW_TRACKING_PASSWORD}", "$HOME/cache", "a$_X"])
def test_a_value_that_refers_to_another_variable_is_refused_naming_its_entry(value):
    message = refusal(["NOTE=plain", f"RUN_LABEL={value}"], trainSecretEnv=[f"WANDB_API_KEY={SECRET}"])
    assert "entry 1 (RUN_LABEL)" in message and "refers to another variable" in message


@pytest.mark.parametrize("value", ["costs $5", "50$", "a$-b", "plain"])
def test_a_dollar_that_names_nothing_is_a_literal(value):
    assert not refers_to_variable(value)


@pytest.mark.parametrize("name, words", [
    ("PYTHONBREAKPOINT", "load"), ("OPENSSL_ENGINES", "load"), ("OPENSSL_CONF_INCLUDE", "load"),
    ("TRANSFORMERS_TRUST_REMOTE_CODE", "code that a model or dataset repository ships"),
    ("TLS_KEYLOG_FILE", "TLS session keys"), ("Pythonwarnings", "load"),
    ("PIP_SRC", "installed"), ("PIP_NO_BUILD_ISOLATION", "installed"), ("PYTHONCASEOK", "load"),
    ("NCCL_CONF_FILE", "load"), ("nccl_debug_subsys", "transport check"),
])
def test_names_that_load_code_or_expose_traffic_are_reserved_with_their_reason(name, words):
    assert words in (reserved_reason(name) or "")
    message = refusal([f"{name}=1"])
    assert name in message and "may not set" in message


def test_ordinary_entries_still_pass():
    parsed = config.parse(DEV | {"trainEnv": ["TOKENIZERS_PARALLELISM=false", "NOTE=price 5$", "OMP_NUM_THREADS=4",
                                              "HF_HUB_DISABLE_IMPLICIT_TOKEN=1", "NO_PROXY=*",
                                              "PYTHONUNBUFFERED=1", "PYTHONFAULTHANDLER=1"]})
    assert parsed is not None
