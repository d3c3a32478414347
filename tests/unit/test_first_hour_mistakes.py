"""More of a new user's mistakes (the ninth fresh audit's classes), each answered as the user types it through the
command's own main, with the harness of tests/unit/test_mistakes_before_ray.py (its `here` fixture fails a case that
would start the local Ray cluster): one `error:` line naming the flag, key, file or variable, and the exit code
workload/cli.py documents."""
from __future__ import annotations

import json

import pytest

from tests.unit.test_mistakes_before_ray import LOCAL, _run, here  # noqa: F401  (here: the fixture)
from tools import capacity, leftovers
from workload import cli

P5_STATE = {"deployment": {"resources": [{"urn": "urn:pulumi:p5::raytrain-eks::pulumi:pulumi:Stack::raytrain-eks-p5",
                                          "type": "pulumi:pulumi:Stack"}]}}

CASES = [
    ("launched by torchrun", LOCAL, ["--steps", "3"], {"LOCAL_RANK": "1", "RANK": "1", "WORLD_SIZE": "4"}, cli.USAGE,
     "python -m workload.local runs under a launcher (LOCAL_RANK set, as torchrun sets them)"),
    ("axolotl's two names of the LoRA targets", LOCAL,
     ["--method", "lora", "--lora_target_linear", "--lora_target_modules", "k_proj", "o_proj"], {}, cli.USAGE,
     "--lora_target_linear and --lora_target_modules are two names of --lora_targets, given both"),
    ("a records' field for plain text", LOCAL, ["--dataset", "notes.txt", "--text_field", "content"], {}, cli.USAGE,
     "--text_field content names a field of records, and --dataset"),
    ("restarts without checkpoints", LOCAL, ["--max_failures", "3", "--storage_path", ""], {}, cli.USAGE,
     "--max_failures 3 restarts the workers from their latest checkpoint, and without --storage_path there is none"),
    ("MLflow on Databricks without a workspace", LOCAL, ["--report_to", "mlflow"],
     {"MLFLOW_TRACKING_URI": "databricks://team-profile"}, cli.ENVIRONMENT,
     "MLFLOW_TRACKING_URI is databricks, and nothing says which workspace or with which credentials"),
    ("a zstd-compressed dataset", LOCAL, ["--dataset", "chats.jsonl.zst"], {}, cli.USAGE,
     "--dataset 'chats.jsonl.zst' is zstd-compressed, which is not read: decompress it, or compress it with gzip"),
    ("transformers' Adam betas", LOCAL, ["--adam_beta1", "0.8"], {}, cli.USAGE,
     "--adam_beta1 is not this project's: AdamW runs with torch's default betas"),
    ("an instance size shortened", "tools.capacity", ["--instance-type", "g6e.12xl", "--count", "2"], {}, cli.USAGE,
     "--instance-type g6e.12xl: 12xl is no EC2 size (nano, micro, small, medium, large, xlarge, 2xlarge ... 48xlarge, "
     "metal); did you mean g6e.12xlarge?"),
    ("another stack's state", "tools.leftovers", ["--stack", "dev", "--state", "p5-state.json"], {}, cli.USAGE,
     "--state p5-state.json is stack p5's export, not dev's"),
]


@pytest.mark.parametrize("case, command, argv, environment, code, words", CASES, ids=[case[0] for case in CASES])
def test_a_mistake_is_one_line_naming_the_fix(here, capsys, monkeypatch, case, command, argv, environment,  # noqa: F811
                                              code, words):
    (here / "notes.txt").write_text("the cat sees the ball .\n" * 50)
    (here / "p5-state.json").write_text(json.dumps(P5_STATE))
    (here / "chats.jsonl.zst").write_bytes(b"\x28\xb5\x2f\xfd")  # zstd's magic number, as the file begins
    for name, value in environment.items():
        monkeypatch.setenv(name, value)
    main = {"tools.capacity": capacity.cli.main, "tools.leftovers": leftovers.main}.get(command)
    exit_code = _run(command, argv) if main is None else cli.run(main, argv)
    err = capsys.readouterr().err
    lines = err.splitlines()
    assert exit_code == code and words in err, f"{case}: exited {exit_code}, not {code}, or not {words!r}:\n{err}"
    assert len(lines) <= 2 and "Traceback" not in err, f"{case}: one line and a hint at most:\n{err}"


def test_a_tmpdir_too_deep_for_rays_sockets_puts_the_cluster_under_tmp(tmp_path, monkeypatch, capsys):
    """Ray's sockets sit under the cluster's temp dir, and a Unix socket's path holds 107 bytes: a deep TMPDIR made
    `ray start` fail with its traceback; the local cluster's files go under /tmp instead, said in one note."""
    import tempfile

    from workload.run import checks

    deep = tmp_path / ("d" * 60)
    deep.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(deep))
    checks.check_socket_room()
    assert checks.ray_temp_base() == "/tmp"
    assert "the local cluster's files go under /tmp" in capsys.readouterr().err
    monkeypatch.setattr(tempfile, "tempdir", "/tmp")
    checks.check_socket_room()
    assert checks.ray_temp_base() == "/tmp" and capsys.readouterr().err == ""


def test_a_config_file_not_in_utf8_is_named_so(tmp_path, capsys):
    from workload.run import local

    (tmp_path / "run.yaml").write_bytes("run_name: caf\u00e9\nsteps: 3\n".encode("cp1252"))
    assert cli.run(local.main, ["--config", str(tmp_path / "run.yaml")]) == cli.USAGE
    assert "run.yaml: not UTF-8 text (byte 0xe9 on line 1); save it as UTF-8" in capsys.readouterr().err


def test_what_a_user_holds_by_mistake_is_named(tmp_path):
    """A PEFT adapter directory or a Hub cache entry as --model_id, datasets' save_to_disk output as --dataset."""
    from workload.config import TrainConfig
    from workload.run import preflight

    adapters = tmp_path / "model_000010"
    adapters.mkdir()
    (adapters / "adapter_config.json").write_text(json.dumps({"base_model_name_or_path": "Qwen/Qwen2.5-0.5B"}))
    with pytest.raises(ValueError, match=r"it holds LoRA adapters \(adapter_config.json\), not a model: give their "
                                         r"base model \(Qwen/Qwen2.5-0.5B\)"):
        preflight.check_local_files(TrainConfig(model_id=str(adapters), seq_len=32))
    cached = tmp_path / "models--acme--base-7b"
    (cached / "snapshots").mkdir(parents=True)
    with pytest.raises(ValueError, match=r"it is a Hub cache entry: give the model's id \(acme/base-7b\)"):
        preflight.check_local_files(TrainConfig(model_id=str(cached), seq_len=32))
    saved = tmp_path / "saved"
    saved.mkdir()
    (saved / "dataset_info.json").write_text("{}")
    with pytest.raises(ValueError, match="is a dataset datasets' save_to_disk wrote"):
        TrainConfig(dataset=str(saved))
