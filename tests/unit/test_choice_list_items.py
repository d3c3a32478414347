"""Every item of a choice, or of a comma list of choices, is quoted by a refusal only as a single choice is (short and
plain: workload/config/fields.py shown_choice, through shown_items for a list): every choice and comma-list flag of
the declarations, and --chat_template where it names a choice, given from the command line and from a --config file.
The item is random lower-case letters and digits, which the generic masking rule (secret_text.py) lets through, so
only the choice rule keeps it out."""
from __future__ import annotations

import random
import string

import pytest
import yaml

from workload import cli
from workload.config import DECLARED
from workload.config.fields import shown_items
from workload.model import adapters
from workload.run.local import parse_command


def _random_item() -> str:
    """27 characters: a prefix a token rule does not know, and 24 of one case, as a pasted key's tail."""
    return "wb_" + "".join(random.choices(string.ascii_lowercase + string.digits, k=24))


# A list's valid first item, so the random one is what is refused; a choice flag gets the random item alone.
CHOICE_FLAGS = sorted([declared.name for declared in DECLARED if declared.choices or declared.comma_list]
                      + ["chat_template"])  # its choices are checked beside its .jinja files, in TrainConfig
FIRST_ITEM = {declared.name: str(declared.default) for declared in DECLARED if declared.comma_list}


def _parse_only(argv):
    parse_command(argv)
    return cli.OK


def test_the_walk_holds_the_list_flags():
    assert {"report_to", "lora_targets"} <= set(FIRST_ITEM), FIRST_ITEM
    assert {"lr_schedule", "sharding", "chat_template"} <= set(CHOICE_FLAGS), CHOICE_FLAGS


@pytest.mark.parametrize("name", CHOICE_FLAGS)
@pytest.mark.parametrize("given", ["flag", "config file"])
def test_an_unknown_item_is_never_quoted(name, given, tmp_path, capsys):
    item = _random_item()
    value = f"{FIRST_ITEM[name]},{item}" if name in FIRST_ITEM else item
    argv = [f"--{name}", value]
    if given == "config file":
        (tmp_path / "run.yaml").write_text(yaml.safe_dump({name: value}))
        argv = ["--config", str(tmp_path / "run.yaml")]
    # lora_targets' names are refused by the model's layers (below); --method lora makes every list flag checked
    code = cli.run(_parse_only, [*argv, "--method", "lora"] if name != "method" else argv)
    said = capsys.readouterr().err
    assert code == cli.USAGE or name == "lora_targets", f"--{name} {value}: exit {code}: {said[:300]}"
    assert item not in said and item[3:15] not in said, f"--{name} ({given}): echoed: {said[:300]}"
    if code == cli.USAGE:
        assert f"--{name}" in said and "a value of 27 characters (not shown)" in said, said[:300]


def test_a_name_the_model_lacks_is_quoted_as_a_choice():
    item = _random_item()
    with pytest.raises(ValueError) as refused:
        adapters.resolve(f"q_proj,{item},gate_prj", ["q_proj", "gate_proj"])
    message = str(refused.value)
    assert item not in message and "named a value of 27 characters (not shown), 'gate_prj';" in message, message


def test_a_short_mistyped_item_is_still_quoted_and_a_long_list_counted():
    assert shown_items("tensorbord,wandb".split(",")) == "'tensorbord', 'wandb'"
    assert shown_items(["a"] * 11) == "'a', 'a', 'a', 'a', 'a', 'a', 'a', 'a' and 3 more"
