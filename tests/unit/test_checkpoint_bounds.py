"""Issue 31, item 6: a checkpoint's `.metadata` and config.json are checked before anything is built or allocated
from them (workload/checkpoint/reader.py's check_storage, workload/checkpoint/model_config.py).

The checkpoint is a real DCP checkpoint of a tiny Qwen2 in the layout the job saves ({"model": {"lm.<name>": ...}}),
then tampered with as whoever can write the storage prefix could: a config.json of a 7B model's defaults beside it, a
config.json too large or of no causal LM, a `.metadata` claiming a tensor larger than its shard files or naming a shard
outside the checkpoint.
"""
from __future__ import annotations

import dataclasses
import json
import os
import pickle
import time
import warnings

import pytest
import torch
import torch.distributed.checkpoint as dcp

from workload import cli
from workload.checkpoint import export, model_config
from workload.checkpoint import reader as checkpoint_reader
from workload.checkpoint import sharded as checkpoint
from workload.config import TINY
from workload.model.loss import LM_PREFIX


@pytest.fixture
def saved(tmp_path) -> str:
    from transformers import AutoModelForCausalLM, Qwen2Config

    torch.manual_seed(0)
    config = Qwen2Config(**TINY)
    lm = AutoModelForCausalLM.from_config(config)
    directory = str(tmp_path / "checkpoint_000003")
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="torch.distributed is disabled")
        dcp.save({checkpoint.MODEL_KEY: {LM_PREFIX + name: t for name, t in lm.state_dict().items()}},
                 checkpoint_id=directory, no_dist=True)
    config.save_pretrained(directory)
    with open(os.path.join(directory, checkpoint.STEP_FILE), "w") as file:
        json.dump({"step": 3, "tokenizer": ""}, file)
    return directory


def exported(directory: str, out: str, capsys) -> tuple[int, list[str]]:
    code = cli.run(export.main, [directory, out])
    return code, capsys.readouterr().err.strip().splitlines()


def write_config(directory: str, text: str) -> str:
    path = os.path.join(directory, model_config.CONFIG_FILE)
    with open(path, "w") as file:
        file.write(text)
    return path


def test_a_genuine_checkpoint_still_exports(saved, tmp_path, capsys):
    code, lines = exported(saved, str(tmp_path / "model"), capsys)
    assert code == cli.OK and os.path.isfile(tmp_path / "model" / "model.safetensors"), lines


@pytest.mark.parametrize("config, words", [
    ('{"model_type": "qwen2"}', ["[151936, 4096]", "not the checkpoint's own"]),
    (json.dumps({**TINY, "model_type": "qwen2", "hidden_size": TINY["hidden_size"] * 2}), ["shape"]),
    ('{"model_type": "qwen2", "num_hidden_layers": 1000000000}', ["num_hidden_layers", "1 to 1024"]),
    ('{"model_type": "qwen2", "vocab_size": "many"}', ["vocab_size", "integer"]),
    ('{"model_type": "vit"}', ["model_type 'vit'", "causal language model"]),
    ('["qwen2"]', ["list", "JSON object"]),
    ('{"model_type": "qwen2"', ["not JSON"]),
    ('{"model_type": "qwen2", "pad": "' + "x" * (model_config.MAX_CONFIG_BYTES + 1) + '"}', ["at most 1,048,576"]),
])
def test_a_crafted_config_is_refused_in_one_line_before_any_model_is_built(saved, tmp_path, capsys, config, words):
    path = write_config(saved, config)
    started = time.perf_counter()
    code, lines = exported(saved, str(tmp_path / "model"), capsys)
    assert time.perf_counter() - started < 10, "refused before a 7B model is built (which took minutes and 13 GB)"
    assert code == cli.USAGE and len(lines) == 1, f"exit 2 and one line; got {code}: {lines}"
    # The file named by its path, or (refused before the imports, by workload/checkpoint/file_checks.py) as CHECKPOINT's.
    named = path in lines[0] or f"CHECKPOINT {saved}: its file {model_config.CONFIG_FILE} " in lines[0]
    missing = [word for word in words if word not in lines[0]] + ([] if named else [path])
    assert not missing, f"the refusal should name {missing}: {lines[0]}"
    assert not os.path.exists(tmp_path / "model"), "nothing is written from a refused checkpoint"


def rewrite_metadata(directory: str, change) -> str:
    metadata = checkpoint_reader.read_metadata(directory)
    change(metadata)
    path = os.path.join(directory, checkpoint_reader.METADATA_FILE)
    with open(path, "wb") as file:
        pickle.dump(metadata, file)
    return path


def test_metadata_claiming_more_than_its_shards_hold_is_refused_before_allocating(saved):
    def claim_a_terabyte(metadata):
        name = next(iter(n for n in metadata.state_dict_metadata if n.startswith(checkpoint.MODEL_KEY)))
        item = metadata.state_dict_metadata[name]
        metadata.state_dict_metadata[name] = dataclasses.replace(item, size=torch.Size([1 << 20, 1 << 18]))

    path = rewrite_metadata(saved, claim_a_terabyte)
    with pytest.raises(checkpoint_reader.CheckpointRefused, match="more than the .* its shard files hold") as refused:
        checkpoint.read_model_state(saved)
    assert path in str(refused.value)


@pytest.mark.parametrize("name, words", [("../../elsewhere/__0_0.distcp", ["shard file"]),
                                         ("__9_0.distcp", ["missing"])])
def test_metadata_naming_a_shard_outside_or_absent_is_refused(saved, name, words):
    def point_elsewhere(metadata):
        index = next(iter(metadata.storage_data))
        metadata.storage_data[index] = dataclasses.replace(metadata.storage_data[index], relative_path=name)

    rewrite_metadata(saved, point_elsewhere)
    with pytest.raises(checkpoint_reader.CheckpointRefused) as refused:
        checkpoint_reader.read_metadata(saved)
    assert all(word in str(refused.value) for word in words), refused.value


def test_metadata_placing_an_item_past_its_file_is_refused(saved):
    def past_the_end(metadata):
        index = next(iter(metadata.storage_data))
        info = metadata.storage_data[index]
        metadata.storage_data[index] = dataclasses.replace(info, offset=info.offset + (1 << 30))

    rewrite_metadata(saved, past_the_end)
    with pytest.raises(checkpoint_reader.CheckpointRefused, match="places an item at bytes"):
        checkpoint_reader.read_metadata(saved)


def test_a_recorded_tokenizer_with_credentials_is_neither_loaded_nor_shown(saved, tmp_path, capsys):
    """The job's --tokenizer refuses credentials in a URI, so a record holding them is none the job wrote: refused,
    naming train_step.json, the credential never shown (and nothing written)."""
    secrets = {"https://builder:Tr0ub4dor-31@models.example.net/tok": "Tr0ub4dor-31",
               "https://hub.example.net/org/tok?token=c0ffee-5ecret-99": "c0ffee-5ecret-99"}
    for number, (tokenizer, secret) in enumerate(secrets.items()):
        with open(os.path.join(saved, checkpoint.STEP_FILE), "w") as file:
            json.dump({"step": 3, "tokenizer": tokenizer}, file)
        code = cli.run(export.main, [saved, str(tmp_path / f"model{number}")])
        out, err = capsys.readouterr()
        assert code == cli.USAGE and "train_step.json: its tokenizer must hold no user:password@" in err, err
        assert secret not in out + err, f"the checkpoint's credential printed: {err}"
        assert not (tmp_path / f"model{number}").exists()


def test_config_keys_naming_remote_code_are_dropped_with_one_note(saved, tmp_path, capsys):
    path = os.path.join(saved, model_config.CONFIG_FILE)
    with open(path) as file:
        config = json.load(file)
    config["auto_map"] = {"AutoConfig": "someone/elsewhere--configuration_x.XConfig",
                          "AutoModelForCausalLM": "someone/elsewhere--modeling_x.XForCausalLM"}
    config["custom_pipelines"] = {"x-gen": {"impl": "someone/elsewhere--pipe.XPipe"}}
    write_config(saved, json.dumps(config))
    code, lines = exported(saved, str(tmp_path / "model"), capsys)
    assert code == cli.OK, lines
    with open(tmp_path / "model" / "config.json") as file:
        written = json.load(file)
    assert "auto_map" not in written and "custom_pipelines" not in written, sorted(written)
    notes = [line for line in lines if line.startswith("note: ")]
    assert len(notes) == 1 and "auto_map, custom_pipelines dropped from config.json" in notes[0], lines


def test_an_adapter_directory_drops_remote_code_and_hides_a_recorded_credential(tmp_path):
    from workload.checkpoint import adapter_export

    config = {"r": 4, "lora_alpha": 8, "target_modules": ["q_proj"], "peft_type": "LORA",
              "auto_mapping": {"base_model_class": "XForCausalLM", "parent_library": "elsewhere.modeling"}}
    notes = adapter_export.save_adapter_directory(config, {}, str(tmp_path / "adapter"),
                                                  tokenizer="s3://AKIDEXAMPLE:wJalr-xyz@bucket/tok")
    with open(tmp_path / "adapter" / adapter_export.ADAPTER_CONFIG) as file:
        assert "auto_mapping" not in json.load(file)
    assert "auto_mapping" in config, "the caller's config is left as it was"
    assert len(notes) == 2 and "auto_mapping dropped from adapter_config.json" in notes[0], notes
    assert "wJalr-xyz" not in " ".join(notes) and "the tokenizer the checkpoint records" in notes[1], notes


def test_an_export_this_machine_cannot_hold_is_exit_3_before_the_model_is_built(saved, tmp_path, capsys, monkeypatch):
    """The model's size comes from the checkpoint's own metadata (checked against its config.json): a machine whose
    available memory is below the float32 build (a 70B model's 280 GB on a laptop, here the tiny model against a
    machine of 1 MiB) is told so, exit 3, before the model is allocated; OUT without the disk for the weights too."""
    from transformers import AutoModelForCausalLM, Qwen2Config

    from workload.checkpoint import export_room

    lm = AutoModelForCausalLM.from_config(Qwen2Config(**TINY))
    parameters = sum(p.numel() for p in lm.parameters())
    largest = max(t.numel() * t.element_size() for t in lm.state_dict().values())  # read whole, then copied in
    monkeypatch.setattr(export_room, "available_memory", lambda: 1 << 20)
    built, build = [], AutoModelForCausalLM.from_config  # the export's float32 build (dtype=), not the meta check's

    def counted(*args, **kwargs):
        return built.append(kwargs) if "dtype" in kwargs else build(*args, **kwargs)

    monkeypatch.setattr(AutoModelForCausalLM, "from_config", counted)
    code, lines = exported(saved, str(tmp_path / "model"), capsys)
    assert code == cli.ENVIRONMENT and built == [] and not (tmp_path / "model").exists(), lines
    need = (parameters * 4 + largest + export_room.OVERHEAD_BYTES) / export_room.GIB
    assert lines[0] == (f"error: the checkpoint's model has {parameters / 1e9:,.2f} billion parameters: the export builds "
                        f"them in float32, {need:,.1f} GiB "
                        "of memory with the load's buffers, and this machine has 0.0 GiB available"), lines


@pytest.mark.parametrize("dtype, hint, memory", [("float32", ", or --dtype bfloat16 for half", "261.0"),
                                                  ("bfloat16", "", "130.6")])
def test_the_room_check_counts_the_dtype_written(dtype, hint, memory):
    """A 70B model is built at --dtype: 280 GB of float32 or 140 GB of bfloat16 (130.4 GiB), with the load's buffers."""
    from workload.checkpoint import export_room

    seventy_b = 70_000_000_000
    with pytest.raises(cli.EnvironmentProblem, match=fr"70\.00 billion parameters: the export builds them in {dtype}, "
                                                     fr"{memory} GiB of memory .* 64\.0 GiB") as refused:
        export_room.check_room(seventy_b, dtype, "/tmp/out", memory=64 * export_room.GIB, free_disk=10**15)
    assert refused.value.hint.startswith("--dtype bfloat16 builds it in half") == (dtype == "float32")
    export_room.check_room(seventy_b, dtype, "/tmp/out", memory=300 * export_room.GIB, free_disk=10**15)
    with pytest.raises(cli.EnvironmentProblem) as refused:
        export_room.check_room(seventy_b, dtype, "/tmp/out", memory=300 * export_room.GIB, free_disk=100 * export_room.GIB)
    weights = seventy_b * export_room.DTYPE_BYTES[dtype] / export_room.GIB
    assert str(refused.value) == (f"OUT /tmp/out: the model's weights take {weights:,.1f} GiB at --dtype {dtype}, and "
                                  "its disk has 100.0 GiB free"), refused.value
    assert refused.value.hint == "give an OUT on a disk with the room" + hint


def test_a_bfloat16_export_is_the_float32_export_rounded_and_never_holds_the_float32_model(saved, tmp_path, capsys,
                                                                                         monkeypatch):
    """--dtype bfloat16 builds the model in bfloat16 and the load casts each float32 master weight into it: every
    tensor written equals the float32 export's rounded to bfloat16, bit for bit, and no float32 model was built."""
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM

    assert cli.run(export.main, [saved, str(tmp_path / "f32")]) == cli.OK
    builds, build = [], AutoModelForCausalLM.from_config

    def counted(*args, **kwargs):
        builds.append(kwargs.get("dtype"))
        return build(*args, **kwargs)

    monkeypatch.setattr(AutoModelForCausalLM, "from_config", counted)
    assert cli.run(export.main, [saved, str(tmp_path / "bf16"), "--dtype", "bfloat16"]) == cli.OK, capsys.readouterr()
    assert torch.float32 not in builds and torch.bfloat16 in builds, builds
    full, half = (load_file(str(tmp_path / name / "model.safetensors")) for name in ("f32", "bf16"))
    assert sorted(full) == sorted(half)
    for name, tensor in full.items():
        assert tensor.dtype == torch.float32 and half[name].dtype == torch.bfloat16, name
        assert torch.equal(half[name], tensor.to(torch.bfloat16)), name


@pytest.mark.parametrize("record, words", [
    ({"step": 3, "tokenizer": "t" * 100_000}, "its tokenizer must be at most 2,048 characters, got 100,000"),
    ({"step": 3, "tokenizer": "org/tok\u202ename"}, "its tokenizer must hold no control, format"),
    ({"step": 3, "tokenizer": "https://me:Zq81Lmx0@models.example.net/tok"}, "its tokenizer must hold no user:password@"),
    ({"step": "3"}, "its step is '3', not a step number"),
    ({"step": -1}, "its step is negative; allowed: 0 to 10,000,000 (--steps' bound)"),
    ({"step": 10_000_001}, "its step is past 10,000,000; allowed: 0 to 10,000,000"),
    ({"step": 4}, "its step 4 is not its directory's, checkpoint_000003"),
    ({"step": 3, "chat_template": ["{{ x }}"]}, "its chat_template is a list, not a template's text"),
])
def test_a_record_the_job_never_writes_is_refused_before_the_model_is_built(saved, tmp_path, capsys, monkeypatch,
                                                                            record, words):
    """train_step.json is untrusted like the rest of the checkpoint: its values are held to what the job writes (a
    step number, a tokenizer within --tokenizer's bounds, a template's text), checked with the checkpoint's other files
    before torch builds anything; nothing of a refused value is repeated."""
    with open(os.path.join(saved, checkpoint.STEP_FILE), "w") as file:
        json.dump(record, file)
    from transformers import AutoModelForCausalLM

    monkeypatch.setattr(AutoModelForCausalLM, "from_config", lambda *a, **k: pytest.fail("a model was built"))
    code, lines = exported(saved, str(tmp_path / "model"), capsys)
    assert code == cli.USAGE and len(lines) == 1 and words in lines[0], lines
    assert lines[0].endswith("not a record the job writes") and "Zq81" not in lines[0] and "t" * 200 not in lines[0]
