"""workload/config/secret_text.py `masked`: the one rule every refusal and every value printed from an untrusted file
passes through. It masks URI user information and credential parameters, each vendor shape of fields.TOKEN_VALUE
(xAI's xai-, Tavily's tvly-, Meta's EAA... among them), and any run of letters and digits that reads as random, a
vendor's shape not in the list included; and it leaves alone every value the project ships (model ids, splits, module
names, the stacks' settings, image references), which a refusal must still quote as typed."""
from __future__ import annotations

import json
import random
import string
from pathlib import Path

import pytest
import yaml

from workload import cli
from workload.config.fields import looks_like_token
from workload.config.secret_text import (
    CREDENTIALS_SHOWN,
    MASKED_MAX_CHARS,
    RANDOM_RUN_CHARS,
    SINGLE_CASE_RUN_CHARS,
    TOKEN_SHOWN,
    masked,
    masked_data,
    random_looking,
)

REPO = Path(__file__).resolve().parents[2]
HIDDEN = "Vb3Nk8Qr1Wz"  # in every token below: a test fails when any part of it is printed


@pytest.mark.parametrize("token", [
    f"xai-{HIDDEN}{HIDDEN}{HIDDEN}pLmK",            # xAI's API keys
    f"tvly-{HIDDEN}{HIDDEN}Jt",                      # Tavily's
    f"tvly-dev-{HIDDEN}{HIDDEN}Jt",
    f"EAAB{HIDDEN}{HIDDEN}x",                        # Meta's Graph API tokens (app, user, page)
    f"EAAC{HIDDEN}{HIDDEN}x",
    f"EAAM{HIDDEN}{HIDDEN}x",
])
def test_the_shapes_of_this_class_are_vendor_tokens(token):
    assert looks_like_token(token), token
    shown = masked(f"trainPushToHub: got '{token}' (not a repo id)")
    assert HIDDEN not in shown and TOKEN_SHOWN in shown and "trainPushToHub" in shown, shown


@pytest.mark.parametrize("token", [
    # prefixes no rule names: only the generic rule can catch them
    f"zq_live_{HIDDEN}{HIDDEN}Yt",
    f"acme-{HIDDEN}abcdefghijklmnop",
    f"KEYX{HIDDEN}{HIDDEN}",
    "p8e-" + "k4m2x9q7w1z5r3t8y6u0v2b4n7c1j5h3",  # one case, base36: 32 characters, letters past f, digits between
])
def test_a_shape_not_in_the_list_is_masked_by_the_generic_rule(token):
    assert not looks_like_token(token), f"{token}: in the vendor list; this test is for the generic rule"
    shown = masked(f"--run_name {token}: must be a name")
    assert token not in shown and token[-12:] not in shown, shown
    assert shown.startswith("--run_name ") and shown.endswith(": must be a name"), shown


def test_random_keys_of_forty_characters_are_masked():
    """The threshold's claim: of random keys of 40 characters (an AWS secret access key's length, base64 with its '/'
    and '+'), about 1 in 2,000 passes; seeded, so the same 4,000 every run."""
    rng = random.Random(20261206)
    keys = ["".join(rng.choice(string.ascii_letters + string.digits + "+/") for _ in range(40)) for _ in range(4000)]
    missed = [key for key in keys if masked(f"got {key}") == f"got {key}"]
    assert len(missed) <= 4, missed[:3]


def test_a_secret_access_key_split_by_slashes_is_one_run():
    key = "Jq7Rz/K2mXpL9vBn+T4wYcE8sDfGhU1iOaZk3NbM"
    assert masked(f"AWS_SECRET_ACCESS_KEY={key} refused") == f"AWS_SECRET_ACCESS_KEY={TOKEN_SHOWN} refused"


@pytest.mark.parametrize("run, expected", [
    ("a" * (RANDOM_RUN_CHARS - 1), False),
    ("Qwen2ForSequenceClassification", False),  # CamelCase words: lower-case letters come in words
    ("Wav2Vec2BertForAudioFrameClassification", False),
    ("0123456789abcdef" * 4, False),             # hexadecimal: a digest, a commit
    ("9f" * (SINGLE_CASE_RUN_CHARS // 2), False),
    ("Mx7pQ2zR9kL4vB8nT1wY", True),               # 20 characters, random
    ("k4m2x9q7w1z5r3t8y6u0v2b4n7c1j5h3", True),
])
def test_the_threshold(run, expected):
    assert random_looking(run) is expected, run


@pytest.mark.parametrize("text, hidden", [
    ("--config s3://AKIDEXAMPLEKEYID:pw-Tq9Zc@team-bucket/run.yaml: No such file", "pw-Tq9Zc"),
    ("HTTPS_PROXY=http://ops:s3cr3t@127.0.0.1:3128 refused", "s3cr3t"),
    ("https://joe:p@ss@models.example.com/m", "p@ss"),
    ("RUN https://bucket.example.com/run?X-Amz-Signature=dead01beef&x=1", "dead01beef"),
    ("see https://host/cb#access_token=opaque77", "opaque77"),
])
def test_uri_credentials_are_masked_and_the_rest_kept(text, hidden):
    shown = masked(text)
    assert hidden not in shown and CREDENTIALS_SHOWN in shown, shown
    assert shown.split("://")[0] == text.split("://")[0], shown


def _strings(value) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [text for key, item in value.items() for text in (*_strings(key), *_strings(item))]
    if isinstance(value, list):
        return [text for item in value for text in _strings(item)]
    return []


def _shipped_values() -> list[str]:
    from infra.kubernetes.images import KNOWN_IMAGES
    from workload.model.adapters import ALL_LINEAR, LINEAR_TARGETS, OUTSIDE_LAYERS
    from workload.model.architectures import CONFIG_DIRECTORY, shipped_ids

    values = [*shipped_ids(), *LINEAR_TARGETS, *OUTSIDE_LAYERS, ALL_LINEAR, *KNOWN_IMAGES]
    values += ["train", "validation", "test", "train[:90%]", "train[90%:]", "train_sft", "test_sft"]
    for path in sorted(REPO.glob("Pulumi*.yaml")):
        values += _strings(yaml.safe_load(path.read_text()))
    for path in sorted(CONFIG_DIRECTORY.glob("*.json")):
        values += _strings(json.loads(path.read_text()))
    values += [path.name for path in (REPO / "data").rglob("*") if path.is_file()]
    values.append("public.ecr.aws/deep-learning-containers/ray@sha256:" + "4f0c2a9e" * 8)
    return values


def test_no_shipped_value_is_taken_for_a_token():
    values = _shipped_values()
    assert len(values) > 200, "the walk found the shipped values"
    taken = [value for value in values if masked(value) != value]
    assert taken == [], taken[:5]


def test_masked_data_masks_keys_and_values_at_any_depth():
    data = {"ranks": {f"host-{HIDDEN}{HIDDEN}": {"networks": ["IB", f"hf_{HIDDEN}{HIDDEN}{HIDDEN}"], "nodes": 2}}}
    shown = json.dumps(masked_data(data))
    assert HIDDEN not in shown and '"IB"' in shown and '"nodes": 2' in shown, shown


def test_every_command_error_exit_masks_what_it_quotes(capsys):
    """workload/cli.py's one error exit: a check that quotes a value whole (here a ValueError naming a URI and a token
    of no known vendor) still prints neither."""
    def main(_argv):
        raise ValueError(f"--storage_path s3://k:{HIDDEN}@b/x is not reachable; --note zz-{HIDDEN}{HIDDEN}")

    assert cli.run(main, []) == cli.USAGE
    error = capsys.readouterr().err
    assert HIDDEN not in error and error.startswith("error: --storage_path s3://") and "--note zz-" in error, error


def test_a_note_is_masked_as_a_refusal_is(capsys):
    """cli.note, the commands' `note:` lines (what an exported checkpoint's files said, RAY_ADDRESS left aside)."""
    cli.note(f"RAY_ADDRESS=ray://admin:{HIDDEN}@head:10001 is left aside; base model ab-{HIDDEN}Xy{HIDDEN}")
    error = capsys.readouterr().err
    assert error.startswith("note: RAY_ADDRESS=ray://") and HIDDEN not in error, error


def test_every_uri_in_a_text_is_masked_and_a_long_text_is_cut_at_a_word():
    assert masked(f"a s3://k:{HIDDEN}@b://j:{HIDDEN}@c/x b") == (f"a s3://{CREDENTIALS_SHOWN}@b://{CREDENTIALS_SHOWN}@c/x b")
    # the cut (MASKED_MAX_CHARS) falls inside the password: half a URI, without its '@', is not shown either
    long = "x" * (MASKED_MAX_CHARS - 16) + f" https://u:{HIDDEN}@host/x tail"
    shown = masked(long)
    assert HIDDEN[:4] not in shown and "https://u:" not in shown and shown.endswith("characters in all)"), shown[-80:]


def test_a_cut_never_ends_inside_a_uris_credentials(capsys):
    """The error exit cuts a long word before masking: a word holding a URI (or an '@') is not shown in part, where a
    cut at 1,000 characters would leave 'user:pass' without the '@' the masking looks for; the line is cut at a
    word's end."""
    secret = "Vq7Lr2Zt9Wx4Ny6B"
    long_uri = "s3://reader:" + secret + "x" * 2_000 + "@bucket/key"

    def refuses(_argv):
        raise ValueError(f"--storage_path {long_uri} " + "and more " * 400)

    assert cli.run(refuses, []) == cli.USAGE
    err = capsys.readouterr().err
    assert secret not in err and f"(a value of {len(long_uri):,} characters)" in err, err[:300]
    head, _, tail = err.splitlines()[0].rpartition("... (")
    assert tail.endswith(" characters)") and head.split(" ")[-1] in ("and", "more"), (head[-40:], tail)
