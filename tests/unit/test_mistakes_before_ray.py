"""A new user's mistakes, each answered as a user types it (the command's own main through workload/cli.py's run, in a
directory of their files): one `error:` line naming the flag, key or file and what to give (a hint line at most), the
exit code workload/cli.py documents, no traceback, no secret's value, before Ray starts and in under a second. A
mistake the checks let through reaches the local run's Ray cluster, which here fails the test instead of starting.

The cases are a fresh audit's: flags (TRL's, transformers' and axolotl's names among them), --config files, data
files, workload.export and tools.job submit, and settings that the others make do nothing."""
from __future__ import annotations

import json
import time

import pytest

from tests.support import run_snapshot
from tools import job as job_cli
from workload import cli
from workload.checkpoint import export
from workload.run import local

TOKEN = "hf_AbCdEfGhIjKlMnOpQrStUvWxYz012345"
WANDB_KEY = "0123456789abcdef0123456789abcdef01234567"

def _safetensors_cut_off() -> bytes:
    """A safetensors file whose header places a 4,000-byte tensor that the 16 bytes after it do not hold."""
    header = json.dumps({"w": {"dtype": "F32", "shape": [1000], "data_offsets": [0, 4000]}}).encode()
    return len(header).to_bytes(8, "little") + header + bytes(16)


# The files the cases name, relative to the directory they run in.
FILES = {
    "latin1.jsonl": '{"text": "caf\xe9 au lait"}\n'.encode("latin-1"),
    "utf16.jsonl": '{"text": "hello"}\n'.encode("utf-16"),
    "chat.csv": b'messages\n"[{""role"": ""user"", ""content"": ""hi""}]"\n',
    "wrapped.json": json.dumps({"data": [{"text": "a b c"}]}).encode(),
    "roles.jsonl": json.dumps({"messages": [{"role": "human", "content": "hi"},
                                            {"role": "bot", "content": "yo"}]}).encode() + b"\n",
    "openai.jsonl": json.dumps({"messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]},
                                             {"role": "assistant", "content": "yo"}]}).encode() + b"\n",
    "notgz.jsonl.gz": b'{"text": "plain"}\n',
    "data.tsv": b"text\nhello\n",
    "chats.zip": b"PK\x05\x06" + bytes(18),  # an empty zip archive
    "corpus.JSONL": b'{"text": "hello"}\n',
    "number.jsonl": b'{"text": 42}\n',
    "arrays.jsonl": b'["a", "b"]\n',
    "pairs.jsonl": b"".join(json.dumps({"prompt": f"q{i}", "completion": f"a{i}"}).encode() + b"\n"
                            for i in range(20)),
    "chats.jsonl": b"".join(json.dumps({"messages": [{"role": "user", "content": f"q{i}"},
                                                     {"role": "assistant", "content": f"a{i}"}]}).encode() + b"\n"
                            for i in range(20)),
    "tabs.yaml": b"steps: 5\n\tlearning_rate: 1e-3\n",
    "method.yaml": b"method: adalora\n",
    "axolotl.yaml": b"datasets:\n  - path: pairs.jsonl\n    type: alpaca\n",
    "token.yaml": f"hf_token: {TOKEN}\n".encode(),
    "wandb.yaml": f"report_to: wandb\nwandb_api_key: {WANDB_KEY}\n".encode(),
    "sci.yaml": b"steps: 1e3\n",
    "twice.yaml": b"steps: 5\nlearning_rate: 1e-3\nsteps: 50\n",
    "nested.yaml": b"config: other.yaml\n",
    "printing.yaml": b"print_config: true\n",
    "model.safetensors": b"",
    "tokenizer.json": b"{}",
    "hidden.yaml": b"[secret]\n",
    "broken.jinja": b"{% for m in messages %}\n{{ m.content }\n{% endfor %}\n",
    "blank.jsonl": b'{"text": ""}\n' * 10,
    "hi.txt": b"hi\n",
    "names.yaml": b"lora_r: 4\nlora_rank: 16\n",  # axolotl's name and ours for one setting
    "six.yaml": b"steps: 6\n",
    "alpaca.jsonl": b"".join(json.dumps({"instruction": f"name dog {i}", "input": ""}).encode() + b"\n"
                             for i in range(12)),
    "weightless/config.json": b'{"model_type": "llama"}',  # a model directory without its *.safetensors
    "cut-off/config.json": b'{"model_type": "llama"}',  # its weights file a download cut short
    "cut-off/model.safetensors": _safetensors_cut_off(),
    "no-vocab/tokenizer_config.json": b"{}",  # a tokenizer directory without a vocabulary file
    # What workload.local exported for a --method lora run: adapters, no checkpoint's .metadata.
    "model_000006/adapter_config.json": b"{}",
    "model_000006/adapter_model.safetensors": b"",
    "kube/config": b"apiVersion: v1\n",  # a directory holding a kubeconfig
    # A local run stopped before its first save: its flags, no checkpoint_<step>/.
    "stopped-run/local_run_flags.json": json.dumps({"checkpoint_every": 20}).encode(),
    "store/exp7": b"notes, not a run\n",
    "store/exp8/checkpoint_000040/.metadata": b"?",  # a checkpoint Ray Train never recorded (no snapshot lists it)
    "checkpoint_000120/.metadata": b"x",
    "half.kubeconfig": b"apiVersion: v1\nusers: [{name: me\n",  # a flow mapping never closed
    # a template that renders the user's turns only
    "greeting.jinja": b"{% for m in messages if m.role == 'user' %}{{ m.content }}\n{% endfor %}",  # a file where the run's directory would be
}

LOCAL, EXPORT, JOB = "workload.local", "workload.export", "tools.job"
# (case, command, argv, exit code, words the error line holds)
MISTAKES = [
    # flags
    ("PEFT's DoRA as a method", LOCAL, ["--method", "dora"], cli.USAGE, "--method must be one of full, lora, qlora"),
    ("dropout above 1", LOCAL, ["--method", "lora", "--lora_dropout", "1.5"], cli.USAGE, "--lora_dropout must be"),
    ("a fused qkv target", LOCAL, ["--method", "lora", "--lora_targets", "q_proj,qkv_proj"], cli.USAGE,
     "--lora_targets: the model has no linear layer named 'qkv_proj'; allowed: all-linear or"),
    ("rank 0", LOCAL, ["--method", "lora", "--lora_rank", "0"], cli.USAGE, "--lora_rank must be at least 1 and at most 1024"),
    ("a file's extension as its format", LOCAL, ["--data_format", "jsonl"], cli.USAGE,
     "--data_format must be one of text, chat, prompt-completion"),
    ("axolotl's alpaca as a format", LOCAL, ["--data_format", "alpaca"], cli.USAGE, "--data_format must be one of"),
    ("axolotl's chatml template", LOCAL, ["--data_format", "chat", "--chat_template", "chatml"], cli.USAGE,
     "--chat_template must be empty"),
    ("a tracker typo", LOCAL, ["--report_to", "tensorbord"], cli.USAGE, "--report_to must be a comma list of"),
    ("a Hub repo without owner", LOCAL, ["--push_to_hub", "my-model"], cli.USAGE, "--push_to_hub must be a Hub repo"),
    ("TRL's --bf16", LOCAL, ["--bf16"], cli.USAGE, "--bf16 is not this project's: the job computes in bf16"),
    ("TRL's --fp16", LOCAL, ["--fp16"], cli.USAGE, "--fp16 is not this project's"),
    ("TRL's --warmup_ratio", LOCAL, ["--warmup_ratio", "0.1"], cli.USAGE, "give --warmup_steps"),
    ("TRL's --packing", LOCAL, ["--packing"], cli.USAGE, "--packing is not this project's: packing is always on"),
    ("--weight_decay", LOCAL, ["--weight_decay", "0.1"], cli.USAGE, "torch's default weight decay"),
    ("transformers' --optim", LOCAL, ["--optim", "adamw_torch"], cli.USAGE, "--optim is not this project's"),
    ("a trailing comma", LOCAL, ["--learning_rate", "2e-4,"], cli.USAGE, "--learning_rate: invalid float value"),
    ("fractional steps", LOCAL, ["--steps", "1.5"], cli.USAGE, "--steps: invalid int value: '1.5'"),
    ("zero epochs", LOCAL, ["--epochs", "0"], cli.USAGE, "--epochs 0 is no pass over the data"),
    ("more workers than CPUs", LOCAL, ["--num_workers", "64"], cli.USAGE, "--num_workers 64: the local cluster has"),
    ("an s3 URI with one slash", LOCAL, ["--storage_path", "s3:/bucket/runs"], cli.USAGE,
     "s3:/ is a URI with one slash; a URI takes two (s3://bucket/prefix)"),
    ("a model directory that is not there", LOCAL, ["--model_id", "./no-such-model"], cli.USAGE,
     "--model_id ./no-such-model: no such directory on this machine"),
    ("a tokenizer directory that is not there", LOCAL, ["--tokenizer", "./no-such-tokenizer"], cli.USAGE,
     "--tokenizer ./no-such-tokenizer: no such directory on this machine"),
    ("the model's weights file as the model", LOCAL, ["--model_id", "model.safetensors"], cli.USAGE,
     "--model_id 'model.safetensors' is a file; give the directory holding config.json and *.safetensors"),
    ("the tokenizer's file as the tokenizer", LOCAL, ["--tokenizer", "tokenizer.json"], cli.USAGE,
     "--tokenizer 'tokenizer.json' is a file; give the directory holding the tokenizer files"),
    ("a chat template that does not compile", LOCAL, ["--data_format", "chat", "--chat_template", "broken.jinja"],
     cli.USAGE, "broken.jinja: not a Jinja template it can compile (line 2: unexpected '}')"),
    ("a checkpoint mode typo", LOCAL, ["--checkpoint_mode", "asyncc"], cli.USAGE, "--checkpoint_mode must be one of"),
    # settings the others make do nothing
    ("a chat template for text", LOCAL, ["--chat_template", "llama3"], cli.USAGE,
     "--chat_template llama3 applies to chat and prompt-completion examples"),
    ("a messages field for text", LOCAL, ["--messages_field", "conversation"], cli.USAGE,
     "--messages_field conversation names a field of --data_format chat records"),
    ("a prompt field for chat", LOCAL, ["--data_format", "chat", "--prompt_field", "question"], cli.USAGE,
     "--prompt_field question names a field of --data_format prompt-completion records"),
    ("a text field for chat", LOCAL, ["--data_format", "chat", "--text_field", "body"], cli.USAGE,
     "add --data_format text, or leave --text_field unset"),
    ("truncation of text", LOCAL, ["--truncation", "split"], cli.USAGE, "--truncation split applies to chat"),
    ("a split of a file", LOCAL, ["--dataset_split", "test"], cli.USAGE,
     "--dataset_split test names a split of a Hugging Face --dataset"),
    ("a configuration of a file", LOCAL, ["--dataset_config", "wikitext-2-raw-v1"], cli.USAGE,
     "leave --dataset_config unset"),
    ("sync saves of no checkpoints", LOCAL, ["--checkpoint_mode", "sync", "--storage_path", ""], cli.USAGE,
     "--checkpoint_mode sync sets how checkpoints are saved, and without --storage_path none are"),
    ("a tokenizer for random tokens", LOCAL, ["--dataset", "", "--tokenizer", "org/tokenizer"], cli.USAGE,
     "--tokenizer org/tokenizer has no effect without --dataset: random tokens (an empty --dataset) are not "
     "tokenized"),
    ("dropout without lora", LOCAL, ["--lora_dropout", "0.1"], cli.USAGE, "--lora_dropout 0.1 sets the adapters"),
    # --config files
    ("a file that is not there", LOCAL, ["--config", "run.yml"], cli.USAGE, "--config run.yml: No such file"),
    ("a tab in YAML", LOCAL, ["--config", "tabs.yaml"], cli.USAGE,
     "--config tabs.yaml: not YAML (line 2): a tab character, and YAML forbids tabs for indentation"),
    ("a choice that is none in a file", LOCAL, ["--config", "method.yaml"], cli.USAGE, "--method must be one of"),
    ("axolotl's datasets list", LOCAL, ["--config", "axolotl.yaml"], cli.USAGE,
     "datasets is not this project's: axolotl's list of datasets: give one --dataset"),
    ("a key given twice", LOCAL, ["--config", "twice.yaml"], cli.USAGE,
     "--config twice.yaml: steps is given twice (lines 1 and 3); keep one"),
    ("--config inside a --config file", LOCAL, ["--config", "nested.yaml"], cli.USAGE,
     "config is a command-line flag, not a --config key"),
    ("--print_config inside a --config file", LOCAL, ["--config", "printing.yaml"], cli.USAGE,
     "print_config is a command-line flag, not a --config key"),
    ("a token as a key", LOCAL, ["--config", "token.yaml"], cli.USAGE, "set HF_TOKEN in the environment"),
    ("a W&B key as a key", LOCAL, ["--config", "wandb.yaml"], cli.USAGE, "set WANDB_API_KEY in the environment"),
    ("a directory as the file", LOCAL, ["--config", "."], cli.USAGE, "--config . is a directory, not a regular file"),
    ("steps in scientific notation", LOCAL, ["--config", "sci.yaml"], cli.USAGE, "steps: invalid int value: '1e3'"),
    # data files
    ("a data file without its flag", LOCAL, ["pairs.jsonl"], cli.USAGE, "did you mean --dataset pairs.jsonl?"),
    ("Latin-1 text", LOCAL, ["--dataset", "latin1.jsonl"], cli.USAGE, "line 1 is not UTF-8 text"),
    ("UTF-16 text", LOCAL, ["--dataset", "utf16.jsonl"], cli.USAGE, "line 1 is not UTF-8 text"),
    ("chat turns in a CSV cell", LOCAL, ["--data_format", "chat", "--dataset", "chat.csv"], cli.USAGE,
     "'chat.csv' is CSV, whose cells are strings"),  # workload/config/rules.py, before the file is read
    ("records wrapped in an object", LOCAL, ["--dataset", "wrapped.json"], cli.USAGE,
     "holds a JSON dict, not a list of records"),
    ("ShareGPT's roles in messages", LOCAL, ["--data_format", "chat", "--dataset", "roles.jsonl"], cli.USAGE,
     'messages[0].role is "human"; allowed: system, user, assistant, tool'),
    ("OpenAI's content parts", LOCAL, ["--data_format", "chat", "--dataset", "openai.jsonl"], cli.USAGE,
     "messages[0].content is"),
    ("a .gz that is not gzip", LOCAL, ["--dataset", "notgz.jsonl.gz"], cli.USAGE, "cannot be read as .jsonl.gz"),
    ("a .tsv file", LOCAL, ["--dataset", "data.tsv"], cli.USAGE,
     "--dataset data.tsv is a file of no format the job reads; allowed: a file ending in .txt"),
    ("a suffix in capitals", LOCAL, ["--dataset", "corpus.JSONL"], cli.USAGE, "(lower case)"),
    ("a number as text", LOCAL, ["--dataset", "number.jsonl"], cli.USAGE, "line 1: text is 42; allowed: a string"),
    ("a list as a record", LOCAL, ["--dataset", "arrays.jsonl"], cli.USAGE, "not a JSON object"),
    ("pairs as chat", LOCAL, ["--data_format", "chat", "--dataset", "pairs.jsonl"], cli.USAGE,
     'no field "messages" (the record\'s fields: completion, prompt); allowed: the field of its turns named with '
     "--messages_field, or ShareGPT's conversations; its fields are a prompt-completion record's: give --data_format "
     "prompt-completion"),
    ("records whose text is all empty", LOCAL, ["--dataset", "blank.jsonl"], cli.USAGE,
     "none of its 10 records holds any text"),
    ("less text than one block", LOCAL, ["--dataset", "hi.txt"], cli.USAGE,
     "packs into 0 training blocks of --seq_len 64 tokens"),
    ("chat as text", LOCAL, ["--dataset", "chats.jsonl"], cli.USAGE,
     'no field "text" (the record\'s fields: messages); allowed: a record with "text" (--text_field); its fields are a '
     "chat record's: give --data_format chat"),
    # workload.export
    ("no OUT", EXPORT, ["model_000006"], cli.USAGE, "the following arguments are required: OUT"),
    ("bf16 for bfloat16", EXPORT, ["ck", "out", "--dtype", "bf16"], cli.USAGE,
     "invalid choice: 'bf16' (choose from 'float32', 'bfloat16')"),
    ("a file as CHECKPOINT", EXPORT, ["pairs.jsonl", "out"], cli.USAGE, "CHECKPOINT pairs.jsonl: no such directory"),
    ("OUT is the checkpoint", EXPORT, ["model_000006", "model_000006"], cli.USAGE, "OUT model_000006 is inside CHECKPOINT model_000006"),
    ("the exported adapters merged", EXPORT, ["model_000006", "out", "--merge"], cli.USAGE,
     "is a model exported already (adapter_model.safetensors), not a checkpoint: PeftModel.from_pretrained"),
    ("a run that stopped before its first save", EXPORT, ["stopped-run", "out"], cli.USAGE,
     "CHECKPOINT stopped-run holds no checkpoint (no checkpoint_<step>/ directory, no .metadata): its run may have "
     "stopped before its first save, at step 20 (--checkpoint_every 20)"),
    # tools.job
    ("submit without a stack", JOB, ["submit", "--print_config"], cli.USAGE, "submit needs --stack"),
    ("training flags before --", JOB, ["submit", "--stack", "dev", "--steps", "200"], cli.USAGE,
     ("--steps is a training flag: give the job's flags after --, as `python -m tools.job submit --stack dev -- "
      "--steps 200`")),
    ("a path on this machine for the pods", JOB, ["submit", "--stack", "dev", "--kubeconfig", "k.yaml", "--",
                                                  "--dataset", "./pairs.jsonl"], cli.USAGE,
     "--dataset ./pairs.jsonl is a path on this machine, which the job's pods cannot read"),
    ("a dataset without a storage path", JOB, ["submit", "--stack", "dev", "--kubeconfig", "k.yaml", "--",
                                               "--dataset", "org/corpus"], cli.USAGE,
     "--dataset org/corpus needs --storage_path (s3://BUCKET/PREFIX) on the cluster"),
    ("adapters without lora on a stack", JOB, ["submit", "--stack", "dev", "--print_config", "--", "--lora_rank", "8"],
     cli.USAGE, "--lora_rank 8 sets the adapters"),
    ("an adapter's default typed without lora", JOB, ["submit", "--stack", "dev", "--print_config", "--",
                                                       "--lora_dropout", "0"], cli.USAGE,
     "--lora_dropout 0.0 sets the adapters, which --method full has none of: add --method lora"),
    ("more workers than the stack's GPUs", JOB, ["submit", "--stack", "dev", "--kubeconfig", "k.yaml", "--",
                                                  "--num_workers", "64"], cli.USAGE,
     "--num_workers (stack key trainNumWorkers): 64 workers need a GPU each, and the cluster has 8 (2 x 4)"),
    ("a model too big for the stack's GPUs", JOB, ["submit", "--stack", "dev", "--kubeconfig", "k.yaml", "--",
                                                   "--model_id", "Qwen/Qwen2.5-72B"], cli.USAGE,
     "--model_id (stack key trainModelId), --batch_size (stack key trainBatchSize), --seq_len (stack key "
     "trainSeqLen): Qwen/Qwen2.5-72B ("),
    ("a node's own directory for the run's storage", JOB, ["submit", "--stack", "dev", "--kubeconfig", "k.yaml", "--",
                                                           "--storage_path", "/mnt/runs"], cli.USAGE,
     "--storage_path (stack key trainStoragePath): /mnt/runs is a directory on each node"),
    ("a token as the run's id", JOB, ["submit", "--stack", "dev", "--run-id", "ghp_" + "Ab1" * 8], cli.USAGE,
     "--run-id holds something shaped like a token (its value is not shown)"),
    ("pulumi's hidden kubeconfig", JOB, ["submit", "--stack", "dev", "--kubeconfig", "hidden.yaml", "--"], cli.USAGE,
     "pulumi hid it: run `pulumi stack output kubeconfig --show-secrets > hidden.yaml`"),
    ("a command typo", JOB, ["lsit", "--stack", "dev"], cli.USAGE, "(did you mean list?)"),
    ("a command's flag typo", JOB, ["logs", "--folow", "--stack", "dev"], cli.USAGE, "(did you mean --follow?)"),
    ("a directory as the kubeconfig", JOB, ["list", "--stack", "dev", "--kubeconfig", "kube"], cli.USAGE,
     "--kubeconfig kube is a directory; a kubeconfig file is expected: did you mean --kubeconfig kube/config?"),
    ("a kubeconfig that is not YAML", JOB, ["list", "--stack", "dev", "--kubeconfig", "half.kubeconfig"], cli.USAGE,
     "--kubeconfig half.kubeconfig: not YAML (line 3)"),
    ("a stack name in capitals", JOB, ["submit", "--stack", "Dev", "--print_config"], cli.USAGE,
     "--stack Dev: no Pulumi.Dev.yaml here; stacks: dev"),
    ("an MLflow server with no mlflow tracker", LOCAL, ["--mlflow_tracking_uri", "http://localhost:5000"], cli.USAGE,
     "--mlflow_tracking_uri is read only when --report_to names mlflow: add --report_to mlflow"),
    ("a W&B project with no wandb tracker", LOCAL, ["--wandb_project", "team"], cli.USAGE,
     "--wandb_project is read only when --report_to names wandb: add --report_to wandb"),
    # workload/config/values.py _network_uri_problem: urllib cannot read the server (no request is tried).
    ("an MLflow server in an unclosed IPv6 bracket", LOCAL,
     ["--report_to", "mlflow", "--mlflow_tracking_uri", "http://[fd00::5/mlflow"], cli.USAGE,
     "--mlflow_tracking_uri must be a URI whose server urllib can read"),
    ("an MLflow server's port past 65535", LOCAL,
     ["--report_to", "mlflow", "--mlflow_tracking_uri", "https://mlflow.internal:70000"], cli.USAGE,
     "--mlflow_tracking_uri must be a URI whose server urllib can read"),
    ("an MLflow server without a scheme", LOCAL, ["--report_to", "mlflow", "--mlflow_tracking_uri", "localhost:5000"],
     cli.USAGE, "--mlflow_tracking_uri must be a tracking URI with a scheme MLflow takes"),
    ("a slice that is no slice", LOCAL, ["--dataset", "org/corpus", "--dataset_split", "train[:abc]"], cli.USAGE,
     "--dataset_split must be a split or datasets' slice of one"),
    ("a percent slice below -100", LOCAL, ["--dataset", "org/corpus", "--eval_split", "test[-120%:]"], cli.USAGE,
     "--eval_split must be a split or datasets' slice of one"),
    ("a Cyrillic letter in a split", LOCAL, ["--dataset", "org/corpus", "--dataset_split", "tr\u0430in"], cli.USAGE,
     "--dataset_split must be a split name in ASCII"),
    ("a dataset configuration that climbs", LOCAL, ["--dataset", "org/corpus", "--dataset_config", "../../etc"],
     cli.USAGE, "--dataset_config must be a dataset configuration name"),
    ("a token as a run name", LOCAL, ["--run_name", TOKEN], cli.USAGE, "--run_name must hold no token"),
    # one setting given by two names (an alias and ours, or two --config files): argparse would keep the last
    ("an alias beside our own flag", LOCAL, ["--num_train_epochs", "2", "--epochs", "3"], cli.USAGE,
     "--num_train_epochs and --epochs are two names of --epochs, given both; give one"),
    ("a dash form beside the underscore one", LOCAL, ["--seq-len", "64", "--seq_len", "128"], cli.USAGE,
     "--seq-len and --seq_len are two names of --seq_len"),
    ("an alias key beside our own key", LOCAL, ["--config", "names.yaml"], cli.USAGE,
     "--config names.yaml: lora_r and lora_rank are two names of lora_rank, given both; keep one"),
    ("two config files", LOCAL, ["--config", "six.yaml", "--config=names.yaml"], cli.USAGE,
     "--config is given 2 times ('six.yaml', 'names.yaml'); give one file"),
    # local files the run reads, checked for what it reads before torch loads
    ("a model directory without weights", LOCAL, ["--model_id", "weightless"], cli.USAGE,
     "--model_id weightless: the directory holds no *.safetensors weights"),
    ("a model's weights file cut short", LOCAL, ["--model_id", "cut-off"], cli.USAGE,
     "--model_id cut-off: model.safetensors places its tensors in 4,000 bytes of data, and the file holds 16"),
    ("a tokenizer directory without a vocabulary", LOCAL, ["--tokenizer", "no-vocab"], cli.USAGE,
     "no tokenizer files in "),
    ("Alpaca records without output", LOCAL, ["--data_format", "prompt-completion", "--dataset", "alpaca.jsonl"],
     cli.USAGE, 'no field "output" (the record\'s fields: input, instruction); an Alpaca record holds instruction'),
    ("a run name that is a file", LOCAL, ["--storage_path", "store", "--run_name", "exp7"], cli.USAGE,
     "--run_name exp7: "),
    ("a run whose checkpoint Ray Train never recorded", LOCAL, ["--storage_path", "store", "--run_name", "exp8"],
     cli.USAGE, "store/exp8/checkpoint_000040 is no checkpoint Ray Train recorded for this run (the run has no "
     "checkpoint_manager_snapshot.json): Ray Train would start the run at step 0"),
    ("a storage path in another cloud", LOCAL, ["--storage_path", "az://box/runs"], cli.USAGE,
     "--storage_path: a az:// location is not read here; allowed: a local path, or s3://BUCKET/PREFIX"),
    ("a dataset at a web address", LOCAL, ["--dataset", "http://files.example.org/train.jsonl"], cli.USAGE,
     "--dataset: a http:// location is not read here; allowed: a local path, a Hub id (owner/name), or s3://"),
    ("an s3 location without its bucket", LOCAL, ["--storage_path", "s3:///runs"], cli.USAGE,
     "--storage_path 's3:///runs': an s3:// location names its bucket; allowed: s3://BUCKET/KEY"),
    ("an AWS key without its secret", LOCAL, ["--storage_path", "s3://team-bucket/exp2"], cli.ENVIRONMENT,
     "this machine's AWS credentials are incomplete: AWS_SECRET_ACCESS_KEY is missing from the environment"),
    ("a checkpoint in another cloud", EXPORT, ["az://box/runs/r/checkpoint_000010", "out"], cli.USAGE,
     "CHECKPOINT az://box/runs/r/checkpoint_000010: a az:// location is not read here; allowed: a local directory or"),
    ("an upload with the Hub offline", LOCAL, ["--push_to_hub", "lab/tuned-r10"], cli.USAGE,
     "--push_to_hub lab/tuned-r10 cannot upload with HF_HUB_OFFLINE=1: the Hub is offline"),
    ("an export into its own checkpoint", EXPORT, ["runs/r/checkpoint_000010", "runs/r/checkpoint_000010/hf"],
     cli.USAGE, "OUT runs/r/checkpoint_000010/hf is inside CHECKPOINT runs/r/checkpoint_000010 (the model would be"),
    ("an upload asked of the export", EXPORT, ["runs/r/checkpoint_000010", "out", "--push_to_hub", "lab/tuned-r9"],
     cli.USAGE, "--push_to_hub: workload.export writes OUT only; upload OUT with `hf upload OWNER/NAME OUT`"),
    ("a checkpoint a digit short", EXPORT, ["checkpoint_00120", "out"], cli.USAGE,
     "CHECKPOINT checkpoint_00120: no such directory (did you mean checkpoint_000120?)"),
    ("the start of one flag's name", LOCAL, ["--activation", "true"], cli.USAGE,
     "(did you mean --activation_checkpointing?)"),
    ("transformers' resume flag", LOCAL, ["--resume_from_checkpoint", "runs/exp3/checkpoint_000010"], cli.USAGE,
     "--resume_from_checkpoint is not this project's: a run resumes by its name: give the same --run_name"),
    ("transformers' steps of -1", LOCAL, ["--seq_len", "48", "--max-steps=-1"], cli.USAGE,
     "--max-steps -1: -1 is transformers' 'train by --num_train_epochs instead': give --epochs N"),
    ("a checkpoint interval longer than the run", LOCAL, ["--checkpoint_every", "60", "--steps", "25"], cli.USAGE,
     "--checkpoint_every 60 is more than --steps 25: the run ends before the first; give at most 25, or 0 for"),
    ("a chat template that renders no assistant turn", LOCAL,
     ["--data_format", "chat", "--dataset", "chats.jsonl", "--chat_template", "greeting.jinja"], cli.USAGE,
     "greeting.jinja renders no assistant turn of --dataset "),
    ("a zip of the data", LOCAL, ["--dataset", "chats.zip"], cli.USAGE,
     "--dataset 'chats.zip' is an archive of files, which is not read: unpack it and give the data file inside"),
    ("the Hub page's address for the upload", LOCAL, ["--push_to_hub", "https://huggingface.co/lab/tuned-r9"],
     cli.USAGE, "is a web address; give the Hub id it names: lab/tuned-r9"),
    ("a dataset's Hub page for a model", LOCAL, ["--model_id", "https://hf.co/datasets/lab/chats-r9"], cli.USAGE,
     "is the Hub page of the dataset lab/chats-r9; --model_id takes a model's id"),
    ("a whole number in scientific notation", LOCAL, ["--checkpoint_every", "1e2"], cli.USAGE,
     "did you mean --checkpoint_every 100? it takes a whole number, written out"),
    ("a percentage for a fraction", LOCAL, ["--eval_fraction", "5%"], cli.USAGE,
     "did you mean --eval_fraction 0.05? it takes a fraction, not a percentage"),
    ("an adapter's default typed, locally", LOCAL, ["--lora_alpha", "32"], cli.USAGE,
     "--lora_alpha 32.0 sets the adapters, which --method full has none of"),
    ("an export typed without a place to write it", LOCAL, ["--export", "final", "--storage_path", ""], cli.USAGE,
     "--export final writes the model under --storage_path/--run_name/, and without --storage_path none is written"),
    ("torchrun's processes per node", LOCAL, ["--nnodes", "2"], cli.USAGE,
     "--nnodes is not this project's: torchrun's node count: Ray Train places the workers"),
    ("fp8 on a machine without an fp8 GPU", LOCAL, ["--fp8"], cli.USAGE,
     "--fp8 needs a GPU with fp8 tensor cores (compute capability 8.9+"),
    # this machine's set-up (ENVIRONMENTS: what the case's shell has set)
    ("an s3 dataset with no AWS credentials", LOCAL, ["--dataset", "s3://bucket/x.jsonl"], cli.ENVIRONMENT,
     "--dataset s3://bucket/x.jsonl: no AWS credentials on this machine to read it from"),
    ("an s3 storage path with no AWS credentials", LOCAL, ["--storage_path", "s3://bucket/runs"], cli.ENVIRONMENT,
     "--storage_path s3://bucket/runs: no AWS credentials on this machine to write checkpoints to"),
    ("an AWS profile that is none", LOCAL, ["--storage_path", "s3://team-bucket/exp"], cli.ENVIRONMENT,
     "--storage_path s3://team-bucket/exp: AWS_PROFILE=ghost-profile is no profile in this machine's AWS config"),
    ("an s3 checkpoint with no AWS credentials", EXPORT, ["s3://bucket/runs/r/checkpoint_000030", "out"],
     cli.ENVIRONMENT, "CHECKPOINT s3://bucket/runs/r/checkpoint_000030: no AWS credentials on this machine to read it"),
    ("an offline Hub without the dataset", LOCAL, ["--dataset", "nobody-here/no-such-data-r46", "--data_format",
                                                   "chat"], cli.ENVIRONMENT,
     "--dataset nobody-here/no-such-data-r46: not in this machine's cache and HF_HUB_OFFLINE is set"),
    ("transformers' offline variable", LOCAL, ["--dataset", "nobody-here/other-data-r9", "--data_format", "chat"],
     cli.ENVIRONMENT, "--dataset nobody-here/other-data-r9: not in this machine's cache and TRANSFORMERS_OFFLINE is set"),
    ("an MLflow server that does not answer", LOCAL, ["--report_to", "mlflow"], cli.ENVIRONMENT,
     "the MLflow tracking server MLFLOW_TRACKING_URI names, http://127.0.0.1:1, does not answer"),
    ("W&B switched off by WANDB_MODE", LOCAL, ["--report_to", "tensorboard,wandb"], cli.USAGE,
     "--report_to wandb records nothing with WANDB_MODE=disabled"),
    ("a W&B server that does not answer", LOCAL, ["--report_to", "wandb"], cli.ENVIRONMENT,
     "--report_to wandb: W&B's server WANDB_BASE_URL names, http://127.0.0.1:1, does not answer"),
    ("a Hub that does not answer for the upload", LOCAL, ["--push_to_hub", "lab/tuned-r9"], cli.ENVIRONMENT,
     "--push_to_hub lab/tuned-r9: the Hugging Face Hub HF_ENDPOINT names, http://127.0.0.1:1, does not answer"),
    ("HF_HOME a file", LOCAL, [], cli.ENVIRONMENT,
     "HF_HOME=hi.txt is a file; the Hugging Face cache must be a directory"),
    ("HF_DATASETS_CACHE under a file", LOCAL, [], cli.ENVIRONMENT,
     "HF_DATASETS_CACHE=hi.txt/datasets: hi.txt is a file; datasets' cache must be a directory"),
]
# The environment a case's shell sets; every case runs on a machine with no AWS credentials (the fixture).
ENVIRONMENTS = {"HF_HOME a file": {"HF_HOME": "hi.txt"},
                "an offline Hub without the dataset": {"HF_HUB_OFFLINE": "1", "HF_HOME": "empty-hf-home"},
                "an MLflow server that does not answer": {"MLFLOW_TRACKING_URI": "http://127.0.0.1:1"},
                # nvidia-smi not on PATH: the machine has no NVIDIA GPU, whatever the one running the tests has
                "fp8 on a machine without an fp8 GPU": {"PATH": "no-gpu-tools"},
                "HF_DATASETS_CACHE under a file": {"HF_DATASETS_CACHE": "hi.txt/datasets"},
                "an AWS profile that is none": {"AWS_PROFILE": "ghost-profile"},
                "transformers' offline variable": {"TRANSFORMERS_OFFLINE": "1", "HF_HOME": "empty-hf-home"},
                "W&B switched off by WANDB_MODE": {"WANDB_MODE": "disabled"},
                "a W&B server that does not answer": {"WANDB_API_KEY": WANDB_KEY, "WANDB_BASE_URL": "http://127.0.0.1:1"},
                "a Hub that does not answer for the upload": {"HF_TOKEN": TOKEN, "HF_ENDPOINT": "http://127.0.0.1:1"},
                "an upload with the Hub offline": {"HF_TOKEN": TOKEN, "HF_HUB_OFFLINE": "1"},
                "an AWS key without its secret": {"AWS_ACCESS_KEY_ID": "AKIAIOSFODNN7PARTIAL"}}


@pytest.fixture
def here(tmp_path, monkeypatch):
    # No AWS credentials anywhere boto3 looks, and no instance metadata to ask: a laptop's, answered without network.
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE",
                 "AWS_CONTAINER_CREDENTIALS_FULL_URI", "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
                 "AWS_WEB_IDENTITY_TOKEN_FILE", "AWS_ENDPOINT_URL_S3"):
        monkeypatch.delenv(name, raising=False)
    for name in ("AWS_SHARED_CREDENTIALS_FILE", "AWS_CONFIG_FILE"):
        monkeypatch.setenv(name, str(tmp_path / "no-aws-files"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-west-2")
    for name, data in FILES.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_bytes(data)
    monkeypatch.chdir(tmp_path)

    def no_cluster(*args, **kwargs):
        raise AssertionError("the mistake was let through: the local Ray cluster would start now")

    monkeypatch.setattr(local, "local_cluster", no_cluster)
    return tmp_path


def _run(command: str, argv: list[str]) -> int:
    main = {LOCAL: local.main, EXPORT: export.main, JOB: job_cli.main}[command]
    if command == LOCAL and "--storage_path" not in argv:
        argv = [*argv, "--storage_path", "runs"]
    try:
        return cli.run(main, argv)
    except SystemExit as exited:  # argparse's refusal exits, as the command would
        return exited.code


@pytest.mark.parametrize("case, command, argv, code, words", MISTAKES, ids=[case[0] for case in MISTAKES])
def test_a_mistake_is_one_line_naming_the_fix_before_ray(here, capsys, monkeypatch, case, command, argv, code, words):
    for name, value in ENVIRONMENTS.get(case, {}).items():
        monkeypatch.setenv(name, value)
    _run(command, argv)  # the first call of a kind pays for its imports; the user's second try is what is timed
    capsys.readouterr()
    started = time.monotonic()
    exit_code = _run(command, argv)
    took = time.monotonic() - started
    out, err = capsys.readouterr()
    lines = err.splitlines()
    assert exit_code == code, f"{case}: `{command} {' '.join(argv)}` exited {exit_code}, not {code}:\n{err}"
    assert words in err, f"{case}: the error must say {words!r}:\n{err}"
    at = next(index for index, line in enumerate(lines) if line.startswith("error:"))
    assert len(lines[at:]) <= 2 and "Traceback" not in err, f"{case}: one line and a hint at most:\n{err}"
    assert TOKEN not in out + err and WANDB_KEY not in out + err, f"{case}: a secret was echoed"
    assert took < 1, f"{case}: answered in {took:.1f} s, not before anything heavy"
    left = sorted(str(path.relative_to(here)) for path in here.rglob("*") if path.is_dir()) if command == LOCAL else []
    given = {"/".join(name.split("/")[:depth]) for name in FILES for depth in range(1, name.count("/") + 1)}
    assert set(left) <= given, f"{case}: a refused run leaves no directory behind: {left}"


def test_every_mistake_is_new_and_named_once():
    names = [case[0] for case in MISTAKES]
    assert len(names) == len(set(names)) and len(names) >= 40, names


def test_a_finished_run_run_again_says_where_its_model_is_and_starts_no_ray(here, capsys):
    run = here / "runs" / "done"
    (run / "checkpoint_000006").mkdir(parents=True)
    (run / "checkpoint_000006" / "train_step.json").write_text('{"step": 6}')
    run_snapshot.write(run, [6])
    assert _run(LOCAL, ["--steps", "6", "--run_name", "done"]) == cli.OK  # `here` fails the test if Ray would start
    out = capsys.readouterr().out
    assert "already reached step 6 of --steps 6: nothing left to train; export its last checkpoint with " \
           "`python -m workload.export" in out and "checkpoint_000006`" in out, out
    (run / "model_000006").mkdir()
    assert _run(LOCAL, ["--steps", "6", "--run_name", "done"]) == cli.OK
    out = capsys.readouterr().out
    assert f"its model: {run / 'model_000006'}" in out and "give --steps above 6" in out, out
