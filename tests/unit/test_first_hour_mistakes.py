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

P5_STATE = {"version": 3, "deployment": {"resources": [{
    "urn": "urn:pulumi:p5::raytrain-eks::pulumi:pulumi:Stack::raytrain-eks-p5", "type": "pulumi:pulumi:Stack"}]}}

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
    ("a token pasted with its quotes", LOCAL, ["--push_to_hub", "me/tiny-sft"],
     {"HF_TOKEN": '"hf_Zx81ksLQwpeRTYuiOPasdfGHJKLzxcvbnm"'}, cli.ENVIRONMENT,
     "HF_TOKEN is wrapped in quotes (a .env file's or a copied line's)"),
    ("a key with a line break", LOCAL, ["--report_to", "wandb"],
     {"WANDB_API_KEY": "0123456789abcdef0123456789abcdef01234567\n"}, cli.ENVIRONMENT,
     "WANDB_API_KEY begins or ends with a space or a line break"),
    ("a data file's name without its suffix", LOCAL, ["--dataset", "notes"], {}, cli.USAGE,
     "--dataset notes is no file here, and notes.txt is: a name without its suffix is read as a Hugging Face dataset "
     "id; did you mean --dataset notes.txt?"),
    # A variable the run's libraries read, with a value they do not recognize (workload/run/variable_values.py).
    ("an offline switch no library reads as on", LOCAL, ["--steps", "3"], {"HF_DATASETS_OFFLINE": "enabled"},
     cli.ENVIRONMENT,
     "HF_DATASETS_OFFLINE=enabled is neither on nor off to datasets (datasets/config.py), which reads any other "
     "word as off"),
    ("a W&B mode W&B does not have", LOCAL, ["--report_to", "wandb"], {"WANDB_MODE": "local"}, cli.ENVIRONMENT,
     "WANDB_MODE=local is not a W&B mode; W&B takes online, offline, disabled"),
    ("threads that are none", LOCAL, ["--steps", "3"], {"OMP_NUM_THREADS": "-4"}, cli.ENVIRONMENT,
     "OMP_NUM_THREADS=-4 is not a number of threads (libgomp ignores it)"),
    ("an AWS profile set empty", "tools.capacity", ["--instance-type", "g6.12xlarge", "--count", "1"],
     {"AWS_PROFILE": " "}, cli.ENVIRONMENT, "AWS_PROFILE is set and empty"),
    ("a GPU's memory in GiB", LOCAL, ["--gpu_memory_mib", "40"], {}, cli.USAGE,
     "--gpu_memory_mib is in MiB, as EC2 gives it, and 40 MiB is no GPU's memory: a card of 40 GiB is "
     "--gpu_memory_mib 40960"),
    ("a GPU's figure on CPU workers", LOCAL, ["--gpu_memory_mib", "24576"], {}, cli.USAGE,
     "--gpu_memory_mib 24576 plans each GPU's memory, and the local run trains on CPU workers, where it does nothing"),
    ("TensorBoard without storage", LOCAL, ["--report_to", "tensorboard", "--storage_path", ""], {}, cli.USAGE,
     "without --storage_path none are written: give --storage_path DIR, or leave tensorboard out"),
    ("axolotl's settings file without its flag", LOCAL, ["sweep.yml"], {}, cli.USAGE,
     "did you mean --config sweep.yml? python -m workload.local takes its settings file as a flag"),
    ("a stack key's name in a --config file", LOCAL, ["--config", "keys.yaml"], {}, cli.USAGE,
     "unrecognized keys: trainNumWorkers\n`python -m workload.local --help` lists every flag (did you mean "
     "--num_workers?)"),
    ("another command's flag", "tools.job", ["logs", "--run-id", "submit-20260101-000000"], {}, cli.USAGE,
     "--run-id is a flag of `submit`, not of `logs`: `python -m tools.job submit --help` tells what it does"),
    ("logs' flag given to summary", "tools.job", ["summary", "--follow"], {}, cli.USAGE,
     "--follow is a flag of `logs`, not of `summary`"),
    ("a GPU's name as the instance type", "tools.capacity", ["--instance-type", "H100", "--count", "2"], {}, cli.USAGE,
     "H100 is a GPU: did you mean p5.48xlarge (8 x H100)?"),
    ("every region by a word", "tools.capacity", ["--instance-type", "g6.12xlarge", "--count", "2", "--regions",
                                                  "all"], {}, cli.USAGE,
     "--regions 'all': leave --regions unset to search every region enabled for the account"),
    ("a --model_config name as --model_id", LOCAL, ["--model_id", "Tiny"], {}, cli.USAGE,
     "--model_id Tiny is the name of a --model_config (random weights): give --model_config tiny"),
    ("a tracking URI with its password in the environment", LOCAL, ["--report_to", "mlflow", "--steps", "3"],
     {"MLFLOW_TRACKING_URI": "https://ana:Zq81Lmx0Pw7rT2@mlflow.example.net/"}, cli.ENVIRONMENT,
     "MLFLOW_TRACKING_URI holds credentials in its address (its value is not shown): MLflow reads them from "
     "MLFLOW_TRACKING_USERNAME and MLFLOW_TRACKING_PASSWORD"),
    ("a Hub mirror with a token in its address", LOCAL, ["--steps", "3"],
     {"HF_ENDPOINT": "https://mirror.example.net/?token=Q1w2E3r4T5y6U7i8"}, cli.ENVIRONMENT,
     "HF_ENDPOINT holds credentials in its address (its value is not shown)"),
    ("a Hub mirror without its scheme", LOCAL, ["--steps", "3"], {"HF_ENDPOINT": "hub.example.org"}, cli.ENVIRONMENT,
     "HF_ENDPOINT=hub.example.org is an address without its scheme: the libraries take a URL, https://hub.example.org"),
    ("a region misspelt in the environment", LOCAL, ["--storage_path", "s3://team-runs/sft"],
     {"AWS_ACCESS_KEY_ID": "AKIAIOSFODNN7EXAMPLE", "AWS_SECRET_ACCESS_KEY": "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
      "AWS_DEFAULT_REGION": "eu-west1"}, cli.ENVIRONMENT,
     "--storage_path s3://team-runs/sft: this machine's AWS region (AWS_DEFAULT_REGION) 'eu-west1' is not an AWS "
     "region's name; did you mean eu-west-1?"),
    ("another stack's state", "tools.leftovers", ["--stack", "dev", "--state", "p5-state.json"], {}, cli.USAGE,
     "--state p5-state.json is stack p5's export, not dev's"),
]


@pytest.mark.parametrize("case, command, argv, environment, code, words", CASES, ids=[case[0] for case in CASES])
def test_a_mistake_is_one_line_naming_the_fix(here, capsys, monkeypatch, case, command, argv, environment,  # noqa: F811
                                              code, words):
    (here / "notes.txt").write_text("the cat sees the ball .\n" * 50)
    (here / "p5-state.json").write_text(json.dumps(P5_STATE))
    (here / "keys.yaml").write_text("trainNumWorkers: 4\n")  # as Pulumi.<stack>.yaml names it
    (here / "chats.jsonl.zst").write_bytes(b"\x28\xb5\x2f\xfd")  # zstd's magic number, as the file begins
    for name, value in environment.items():
        monkeypatch.setenv(name, value)
    main = {"tools.capacity": capacity.cli.main, "tools.leftovers": leftovers.main}.get(command)
    exit_code = _run(command, argv) if main is None else cli.run(main, argv)
    err = capsys.readouterr().err
    lines = err.splitlines()
    assert exit_code == code and words in err, f"{case}: exited {exit_code}, not {code}, or not {words!r}:\n{err}"
    assert len(lines) <= 2 and "Traceback" not in err, f"{case}: one line and a hint at most:\n{err}"
    assert not [value for value in environment.values() if len(value) > 16 and value.strip("\"\n") in err], case


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


def test_the_jobs_command_run_by_hand_names_the_local_run(tmp_path, monkeypatch, capsys):
    """`python -m workload.train` typed as `trl sft` is typed: with no cluster to join, the answer is workload.local,
    before the flags' checks reach the Hub (which answered first, unreachable, with nothing said of the mistake)."""
    import ray._common.utils as ray_utils

    from workload import train
    from workload.run import in_job

    for base in ({"RAY_TMPDIR": str(tmp_path / "ray-tmp")}, {"TMPDIR": str(tmp_path)}, {}):
        for name in ("RAY_TMPDIR", "TMPDIR"):
            monkeypatch.delenv(name, raising=False)
        for name, value in base.items():
            monkeypatch.setenv(name, value)
        assert in_job.ray_address_file() == ray_utils.get_ray_address_file(None), base  # Ray's own rule
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    assert cli.run(train.main, ["--steps", "5", "--model_id", "Qwen/Qwen2.5-0.5B"]) == cli.ENVIRONMENT
    err = capsys.readouterr().err
    assert "python -m workload.train is the Ray job's command" in err and "python -m workload.local" in err, err
    assert "Hub" not in err and len(err.splitlines()) == 2, err
    (tmp_path / "ray").mkdir()
    (tmp_path / "ray" / "ray_current_cluster").write_text("127.0.0.1:6379")  # what `ray start --head` leaves
    in_job.check_started_as_job()  # then ray.init("auto") joins that cluster: the job may be run by hand beside it
    monkeypatch.setenv("RAY_ADDRESS", "10.0.0.5:6379")
    (tmp_path / "ray" / "ray_current_cluster").unlink()
    in_job.check_started_as_job()


@pytest.mark.parametrize("command, argv", [
    (LOCAL, ["--" + "lr" * 150_000]),  # one unknown flag of 300,002 characters
    ("tools.job", ["submit", "--stack", "dev", "--" + "z" * 40_000 + "=1"]),
    # Many short unknown flags, ten times the bound's length: the line is bounded too (argparse's time grows with the
    # square of the flags: 20,000 took 25 s on two cores)
    (LOCAL, [f"--flag{number}" for number in range(2_000)]),
])
def test_an_argparse_error_echoes_the_arguments_bounded(here, capsys, command, argv):  # noqa: F811
    assert _run(command, argv) == cli.USAGE
    err = capsys.readouterr().err
    lines = err.splitlines()
    assert len(lines) <= 2 and "Traceback" not in err and len(err) < 2 * cli.MESSAGE_SHOWN_CHARS + 400, err[:3000]
    assert lines[0].startswith("error: unrecognized arguments: --") and "characters)" in lines[0], lines[0]


def test_a_long_word_in_a_guess_is_cut_saying_its_length(capsys):
    parser = cli.parser("tool", "a tool", check_failed="-")
    parser.add_argument("--steps", type=int)
    with pytest.raises(SystemExit) as exited:
        parser.parse_args(["--stepz", "--" + "k" * 5000])
    err = capsys.readouterr().err
    assert exited.value.code == cli.USAGE and "did you mean --steps?" in err and "--" + "k" * 101 not in err, err
    assert "--" + "k" * 98 + "... (5,002 characters)" in err, err
    assert cli._clipped("a " + "b" * 150 + " c") == "a " + "b" * 100 + "... (150 characters) c"


def test_every_refusal_is_bounded_whatever_it_repeats(tmp_path, capsys):
    """The last bound (workload/cli.py _fail): a refusal that repeats a path or a key the user gave, a megabyte long,
    is cut at 1,000 characters a word and 2,000 a line, each cut saying how long it was; ordinary words untouched."""
    from tools import loss_curve

    out = "z" * 100_000 + ".txt"  # --out must end in .svg: refused naming --out, as given
    code = cli.run(loss_curve.main, [str(tmp_path), "--out", out])
    err = capsys.readouterr().err
    assert code == cli.USAGE and err.startswith(f"error: --out {'z' * 1000}... (100,005 characters)"), err[:200]
    assert len(err) < 3000, len(err)

    def refuses(_argv):
        raise ValueError("--x " + " ".join(["word"] * 1000))

    assert cli.run(refuses, []) == cli.USAGE
    line = capsys.readouterr().err.splitlines()[0]
    assert line.startswith("error: --x word word") and line.endswith("... (5,003 characters)"), line[-60:]


@pytest.mark.parametrize("argument", ["--hub_token=hf_Q7p2Lx9Vb4Nm8Kr3Tf6Hd1Ws5Yc0Za",
                                      "--tracking=https://me:Pw9xLq2@mlflow.example.org/"])
def test_an_unknown_flags_value_is_never_repeated_when_it_may_be_a_secret(argument):
    """argparse repeats an unknown `--flag=value` whole: the flag's name is kept (the user must see which flag), its
    value bounded as every quoted value is (a token's shape, a URI's credentials)."""
    said = cli._bounded(f"unrecognized arguments: {argument}")
    name, _, value = argument.partition("=")
    assert said.startswith(f"unrecognized arguments: {name}=a value of {len(value)} characters (not shown"), said
    assert value not in said and value[8:20] not in said, said
    assert cli._bounded("unrecognized arguments: --stepz=5") == "unrecognized arguments: --stepz=5"
