"""docs/, one page a topic, tested as the README is (tests/docs/test_readme.py): each page's command sequences followed as
written through tests/support/docs_shell.py's shell and stand-ins, its samples against what the commands print, its tables
and figures against the code, and, for every page and the README, its links, the modules and files it names, and
the way back to the README.

- "The cluster from your machine" (README) and docs/tools.md's commands: `tools.status` against the local API
  server, the finder's probe, `workload.transport` on a real EFA log.
- docs/jobs.md's long run: the training job created as the engine would, its job server tests/support/fake_ray_jobs.py
  reached through a local port-forward (tests/runs/test_ray_job.py runs the same provider and `tools.job` against a real
  Ray head and a real job).
- docs/models.md's 8B model on p5, and its table of models x stacks.
- docs/adapters.md's first LoRA run, for real: the local run (a Ray cluster here), the merge, the page's Python loading
  both models; and the run's summary, adapters and answers checked as a LoRA fine-tune's (the suite's one LoRA run
  through Ray Train).
"""
from __future__ import annotations

import contextlib
import importlib
import importlib.util
import inspect
import json
import os
import re
import shlex
import shutil

import pytest

from tests.support.docs_shell import (
    FENCED,
    REPO,
    JourneyAws,
    Shell,
    bash_block,
    github_anchor,
    job_flags,
    page,
    python_block,
    sample_block,
    table,
)
from tests.support.pulumi_mocks import program, run_program_expecting_error, stack_settings
from workload.data.examples import example_blocks
from workload.model.optimizer import learning_rate_at
from workload.run import local

README = page("README.md")
DOCS = sorted(f"docs/{path.name}" for path in (REPO / "docs").glob("*.md"))
PAGES = ["README.md", *DOCS]
NCCL_EFA_LOG = REPO / "tests" / "fixtures" / "nccl" / "efa-synthetic-2x4-g6.12xlarge.log"

# Every ```bash block of every page, by the heading it sits under, and the test that follows it as written. (The
# README's first block is the two set-up lines: the first runs for real, the second is this test suite.)
FOLLOWED = {
    ("README.md", "# Ray Train + FSDP on EKS with EFA"): "test_readme.test_the_first_set_up_command_as_written",
    ("README.md", "## Your model and your data"): "test_readme.test_the_local_data_commands_as_written",
    ("README.md", "### The commands"): "test_readme.test_the_real_cluster_journey_as_written",
    ("README.md", "### The cluster from your machine"): "test_docs.test_the_cluster_from_your_machine_and_the_tools",
    ("docs/tools.md", "## The commands"): "test_docs.test_the_cluster_from_your_machine_and_the_tools",
    ("docs/jobs.md", "## Long runs: `pulumi up` returns, the job runs on"):
        "test_docs.test_the_long_run_flow_as_written",
    ("docs/models.md", "## The memory plan"): "test_docs.test_an_8b_model_on_p5_as_written",
    ("docs/seventy-b.md", "## The stack"): "test_docs.test_the_70b_path_as_written",
    ("docs/adapters.md", "## Your first LoRA run"): "test_docs.test_the_first_lora_run_as_written",
}


# ---- the journeys ------------------------------------------------------------------------------------------

def test_the_cluster_from_your_machine_and_the_tools(project, aws_env, kube_api):
    shell = Shell(project, JourneyAws("us-east-2"), kube_api)
    shell("pulumi stack select dev")
    shell("pulumi up")
    for command in bash_block(README, "### The cluster from your machine"):
        out = shell(command)
    assert "ray-train-gpu-workers-worker-a" in out and "ip-10-0-64-2" in out, f"tools.status's tables:\n{out}"
    tools = page("docs/tools.md")
    shown = sample_block(tools, "`python -m tools.status --kubeconfig kubeconfig.json --stack dev`:")
    assert shown[-1] == "No training job running." and "\n".join(shown[:-1]) in out, (
        f"docs/tools.md's sample of tools.status is what it prints (but the job line, with no job server here):\n{out}")
    assert kube_api.authorizations and set(kube_api.authorizations) == {"Bearer k8s-aws-v1.journey"}, (
        "every API call carries the token from `aws eks get-token`")

    shutil.copy(NCCL_EFA_LOG, project / "job.log")
    outputs = {command: shell(command) for command in bash_block(tools, "## The commands")}
    probe = next(out for command, out in outputs.items() if "--probe" in command)
    assert "ok" in probe and "us-east-2" in probe, f"the probe ranks the probed AZs:\n{probe}"
    verdict = next(json.loads(out) for command, out in outputs.items() if "workload.transport" in command)
    assert verdict["ok"] and set(verdict["verdicts"].values()) <= {"efa", "intra-node"}, verdict


def test_the_long_run_flow_as_written(project, aws_env, kube_api, job_server):
    shell = Shell(project, JourneyAws("us-west-2"), kube_api, creates_jobs=True)
    for command in ("pulumi stack select dev", "pulumi up", "pulumi stack output kubeconfig --show-secrets > "
                    "kubeconfig.json", "pulumi config set trainEnabled true"):
        shell(command)
    commands = bash_block(page("docs/jobs.md"), "## Long runs: `pulumi up` returns, the job runs on")
    outputs = [(command, shell(command)) for command in commands]
    said = {command.split(" --")[0].split("python -m ")[-1]: out for command, out in outputs}
    (job_id,) = job_server.jobs
    job = job_server.jobs[job_id]
    assert job.metadata == {"raytrain.stack": "dev", "raytrain.run_id": "3"} and job_id.startswith("raytrain-dev-3-"), (
        f"`pulumi up` submitted one job for the stack's run 3: {job_id} {job.metadata}")
    assert "--time_limit_s 172800" in job.entrypoint, (
        f"trainTimeoutMinutes 2880 is the job's own limit: {job.entrypoint}")
    assert shell.job["status"] == "RUNNING" and set(shell.job["verdicts"].values()) == {"efa", "intra-node"}, (
        f"`up` returned with the job running and its EFA transport checked: {shell.job}")
    assert said["pulumi stack output jobFollow"].startswith(f"python -m tools.job logs {job_id} --follow"), said
    assert f"Job {job_id} RUNNING (run 3); follow it: python -m tools.job logs --follow --stack dev --kubeconfig " \
        "kubeconfig.json" in said["tools.status"], f"status names the running job:\n{said['tools.status']}"
    assert re.search(rf"{job_id}\s+RUNNING\s+3\s", said["tools.job list"]), said["tools.job list"]
    followed = said["tools.job logs"]
    assert "step 50/50 loss" in followed and followed.rstrip().endswith(f"job {job_id} SUCCEEDED"), (
        f"`logs --follow` streams the job's progress until it ends: {followed[-500:]}")
    summary = json.loads(said["tools.job summary"])
    assert (summary["status"], summary["final_loss"], summary["steps"]) == ("SUCCEEDED", 2.0, 50), summary
    assert said["tools.job stop"].strip() == f"job {job_id} already SUCCEEDED: nothing to stop", said["tools.job stop"]


def test_an_8b_model_on_p5_as_written(project, aws_env):
    shell = Shell(project, JourneyAws("us-east-2"))
    models = page("docs/models.md")
    outputs = [shell(command) for command in bash_block(models, "## The memory plan")]
    assert shell.stack == "p5" and job_flags(shell.run)["--model_id"] == "Qwen/Qwen3-8B", job_flags(shell.run)
    plan = json.loads(outputs[-1])
    assert plan["fits"] and plan["changed"] == [] and plan["shards"] == 16, f"p5 fits Qwen3-8B as requested: {plan}"
    assert f'"peak_gib": {plan["peak_gib"]}' in models, f"docs/models.md shows the plan's peak, {plan['peak_gib']} GiB"


def test_the_70b_path_as_written(project, aws_env):
    from bench.model import step_model
    from workload.config import parse_args as parse_train_args

    shell = Shell(project, JourneyAws("us-west-2"))
    text = page("docs/seventy-b.md")
    outputs = [shell(command) for command in bash_block(text, "## The stack")]
    flags = job_flags(shell.run)
    job = parse_train_args([word for flag in flags.items() for word in flag])  # the default batch, no flag for it
    assert shell.stack == "dev" and (job.method, job.batch_size) == ("qlora", 2), flags
    shown = sample_block(text, "exports the plan as `jobMemoryPlan`:")
    assert json.loads(outputs[-1]) == json.loads(shown[0]), f"the page shows the plan the preview made:\n{outputs[-1]}"
    refused = run_program_expecting_error("dev", {"trainMethod": "full"}, project_dir=project).error
    assert sample_block(text, "naming the method that fits first:") == [str(refused)], \
        f"the page shows the preview's refusal of full as it prints it:\n{refused}"
    line = step_model.method_line("meta-llama/Llama-3.3-70B-Instruct", "qlora", step_model.stack_hardware("dev"), 2,
                                  2048)
    flat = " ".join(text.split())
    for figure in (f"{line['tokens_per_s']} tokens/s", f"{line['step_s']} s per step",
                   f"{line['flops_per_token'] / 1e9:.0f} GFLOP a token",
                   f"{line['inter_node_gb_per_node']:.0f} GB per node"):
        assert figure in flat, f"docs/seventy-b.md shows bench.model.step_model's {figure!r}"
    from workload.model import architectures, memory
    from workload.model.adapters import memory as adapter_memory

    config = architectures.published("meta-llama/Llama-3.3-70B-Instruct")
    two = memory.estimate(config, micro_batch=2, seq_len=2048, shards=8, activation_checkpointing=True,
                          reshard_after_forward=True, compiled=True, method="qlora", reduce_dtype="auto")
    hsdp = {batch: memory.estimate(config, micro_batch=batch, seq_len=2048, shards=4, activation_checkpointing=True,
                                   reshard_after_forward=True, compiled=True, method="qlora", reduce_dtype="auto",
                                   ranks=8).peak_gib for batch in (1, 2)}
    for figure in (f"projects to {two.peak_gib:.1f} GiB", f"projects to {hsdp[2]:.1f} GiB",
                   f"HSDP's shards do fit ({hsdp[1]:.1f} GiB",
                   f"{adapter_memory.NF4_BYTES_PER_PARAMETER:.3f} bytes a weight",
                   f"{adapter_memory.adapter_parameters(config, 16) / 1e6:.0f} M parameters at rank 16"):
        assert figure in flat, f"docs/seventy-b.md shows the memory model's {figure!r}"


def test_the_first_lora_run_as_written(tmp_path, monkeypatch):
    """docs/adapters.md's first LoRA run: its two commands as a user types them from the repository's root (this
    test's directory stands in for it: the local run's runs/local/ is here), for real: a Ray cluster, the job, the
    export. The run prints every step's loss, which falls as little as the page says; the files it names are there;
    the page's Python loads the merged model and the adapters on their base, the merged model gives the adapters'
    logits, and its adapted weights differ from the base's while the frozen ones (embeddings) are the base's.

    The same run is the LoRA prompt-completion fine-tune through Ray Train (tests/runs/test_workload_runs.py checks
    its chat run alike): the summary counts the examples and trained tokens its steps held; the export is a PEFT
    adapter directory with the training's chat template, beside the random-weight base it was trained on, which
    PeftModel.from_pretrained loads with the held-out loss the job reported (over the completions' tokens only), and
    which the local run's generate_chat() answers through that template as the loaded model does by hand."""
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from tests.support import fine_tune_checks
    from workload.config import SUMMARY_PREFIX

    text = page("docs/adapters.md")
    heading = "## Your first LoRA run"
    monkeypatch.setitem(local.LOCAL_DEFAULTS, "storage_path", str(tmp_path / "runs" / "local"))
    shell = Shell(tmp_path, aws=None)
    commands = bash_block(text, heading)
    assert [command.split()[:3] for command in commands] == [[".venv/bin/python", "-m", "workload.local"],
                                                             [".venv/bin/python", "-m", "workload.export"]], commands
    printed, exported = (shell(command) for command in commands)

    losses = [float(loss) for loss in re.findall(r"^step \d+/6 loss ([\d.]+) ", printed, re.M)]
    assert len(losses) == 6, f"a loss a step:\n{printed[-3000:]}"
    shown = [float(figure) for figure in re.search(r"barely learns \(its loss falls from ([\d.]+) to ([\d.]+)\)",
                                                   " ".join(text.split())).groups()]
    assert shown == pytest.approx([losses[0], losses[-1]], abs=0.05), f"the page's losses {shown}, the run's {losses}"
    assert losses[-1] < losses[0] and losses[-1] > 0.8 * losses[0], f"it learns, barely: {losses}"
    run = tmp_path / "runs" / "local" / "first-lora"
    for name in ("checkpoint_000006/adapter_config.json", "model_000006/adapter_model.safetensors",
                 "base_model/model.safetensors", "merged/model.safetensors"):
        assert (run / name).is_file(), f"the page names {name}: {sorted(p.name for p in run.iterdir())}"
    assert "merged: load it with AutoModelForCausalLM.from_pretrained" in exported, exported

    # The run as the job ran it: its summary (the local run's last line) and its adapters.
    cfg = local.parse_args(shlex.split(commands[0])[3:])
    last = printed.splitlines()[-1]
    assert last.startswith(SUMMARY_PREFIX), f"the summary is the run's last line: {last}"
    summary = json.loads(last[len(SUMMARY_PREFIX):])
    assert summary["world_size"] == 2 and summary["examples"] == fine_tune_checks.example_counts(
        cfg, train_examples=96, eval_examples=24), summary["examples"]
    # Rank-16 updates of a random-weight base whose embeddings stay frozen: the loss falls (6.34 -> 5.87 here, at
    # 2e-1 over 10 steps too), not as far as a full fine-tune's.
    assert summary["final_loss"] < 0.95 * summary["initial_loss"], summary
    adapters = summary["model"]
    assert adapters == str(run / "model_000006"), adapters
    assert sorted(name for name in os.listdir(adapters) if name.startswith("adapter")) == [
        "adapter_config.json", "adapter_model.safetensors"], os.listdir(adapters)
    assert fine_tune_checks.chat_template(adapters) == fine_tune_checks.chat_template(cfg.tokenizer), (
        "the export keeps the chat template")
    config = json.loads(open(os.path.join(adapters, "adapter_config.json")).read())
    assert config["base_model_name_or_path"] == str(run / "base_model"), config
    on_fp32_base = PeftModel.from_pretrained(
        AutoModelForCausalLM.from_pretrained(config["base_model_name_or_path"], dtype=torch.float32), adapters)
    # The job evaluates in bf16, the loaded model in fp32.
    assert summary["eval_loss"] == pytest.approx(fine_tune_checks.held_out_loss(on_fp32_base, cfg), rel=2e-2), (
        "eval_loss: the completions' mean loss")
    prompt = local.CHAT_PROMPTS["prompt-completion"]
    by_hand = fine_tune_checks.greedy_answer(on_fp32_base, AutoTokenizer.from_pretrained(cfg.tokenizer), prompt,
                                             2 * local.NEW_TOKENS)
    assert local.generate_chat(adapters, prompt) == by_hand, (
        "generate_chat() on the adapters: the training template's prompt, greedy, to the end of the turn")
    assert f"generate(apply_chat_template({json.dumps(prompt)})): {json.dumps(by_hand)}" in printed, (
        f"the run's own generation is that answer: {printed[-2000:]}")

    loaded: dict = {}
    with contextlib.chdir(tmp_path):
        exec(python_block(text, heading), loaded)  # noqa: S102 - the page's own code, as a user runs it
    merged, tuned = loaded["merged"], loaded["tuned"]
    base = AutoModelForCausalLM.from_pretrained(run / "base_model").state_dict()
    weights = merged.state_dict()
    assert set(weights) == set(base), "the merged model is a plain model of the base's shape"
    adapted = [name for name in base if not torch.equal(weights[name], base[name])]
    assert adapted and all(name.endswith("_proj.weight") for name in adapted), f"only adapted layers change: {adapted}"
    assert torch.equal(weights["model.embed_tokens.weight"], base["model.embed_tokens.weight"]), "embeddings frozen"
    tokens = torch.tensor([[1, 5, 9, 14, 3, 7]])
    with torch.no_grad():
        logits = {"merged": merged(tokens).logits, "tuned": tuned(tokens).logits.float(),
                  "base": AutoModelForCausalLM.from_pretrained(run / "base_model", dtype=torch.float32)(tokens).logits}
    # The adapters load on the bf16 base the run wrote (0.004 from the fp32 merge here); the base alone is 1.0 away.
    gap = {name: float((logits[name] - logits["merged"]).abs().max()) for name in ("tuned", "base")}
    assert gap["tuned"] < 2e-2 and gap["base"] > 0.1, f"the merged model is the adapters' model, not the base: {gap}"


def test_the_model_table_is_what_the_preview_says():
    from bench.model import model_table

    assert model_table.in_readme(page("docs/models.md")) == model_table.markdown(), \
        "docs/models.md's model table is stale: python -m bench.model.model_table --write"


# ---- every page ------------------------------------------------------------------------------------------

def _anchors(path: str) -> set[str]:
    return {github_anchor(heading) for heading in re.findall(r"^#{1,6} (.+)$", FENCED.sub("", page(path)), re.M)}


def _flat(path: str) -> str:
    return " ".join(page(path).split())


def test_every_page_has_a_title_and_the_way_back_and_the_readme_links_each():
    for path in DOCS:
        lines = page(path).splitlines()
        assert lines[0].startswith("# ") and "[Back to the README](../README.md)" in lines[2], f"{path}: {lines[:3]}"
    linked = set(re.findall(r"\]\((docs/[\w-]+\.md)[)#]", README))
    assert linked == set(DOCS), f"the README links every page of docs/: unlinked {set(DOCS) - linked}"
    assert len(README.encode()) < 20_000, f"the README is a ten-minute read: {len(README.encode())} bytes"


@pytest.mark.parametrize("path", PAGES)
def test_every_link_lands_and_no_page_names_an_internal_issue(path):
    text = page(path)
    links = re.findall(r"\]\(([^)\s]+)\)", FENCED.sub("", text))
    if path == "README.md":
        assert len(links) > 15, links
    for link in links:
        if re.match(r"https?://|mailto:", link):
            continue
        target, _, anchor = link.partition("#")
        resolved = (REPO / path).parent / target if target else REPO / path
        assert resolved.exists(), f"{path} links {link}, which is no file of the repository"
        if anchor:
            relative = resolved.resolve().relative_to(REPO).as_posix()
            assert anchor in _anchors(relative), f"{path} links {link}: {relative} has no heading {anchor!r}"
    assert not re.search(r"\bissues? #?\d+", text, re.I), re.search(r".{40}\bissues? #?\d+.{20}", text, re.I)


def test_every_bash_block_is_followed_as_written():
    """Each ```bash block of every page is a test's: the one FOLLOWED names, which reads the block under that
    heading. (Blocks fenced without `bash` need a real cluster or account and are not followed.)"""
    found = set()
    for path in PAGES:
        text = page(path)
        for block in re.finditer(r"^ *```bash$", text, re.M):
            heading = re.findall(r"^#{1,6} .+$", FENCED.sub(lambda m: "\n" * m.group(0).count("\n"),
                                                                text[:block.start()]), re.M)[-1]
            key = next((key for key in FOLLOWED if key[0] == path and heading.startswith(key[1])), None)
            assert key, f"{path}: the ```bash block under {heading!r} is followed by no test: add it to FOLLOWED"
            assert key not in found, f"{path}: two ```bash blocks under {heading!r}; the test reads the first alone"
            found.add(key)
    assert found == set(FOLLOWED), f"FOLLOWED names blocks no page has: {set(FOLLOWED) - found}"
    for (path, heading), test in FOLLOWED.items():
        module, name = test.split(".")
        source = inspect.getsource(getattr(importlib.import_module(f"tests.docs.{module}"), name))
        assert repr(heading)[1:-1] in source or heading in source, f"{test} does not read {path}'s {heading!r}"


REPOSITORY_PATH = re.compile(r"(?<![\w/.-])((?:infra|tools|workload|bench|tests|data|docs|scripts|\.ci)/[\w./-]*)")


def test_every_module_file_and_import_a_page_names_exists():
    """What the pages tell a user to run or read, from a clone: each `python -m MODULE`, each path under the
    repository's folders, each `from MODULE import NAME` of the project's."""
    for path in PAGES:
        flat = _flat(path)
        for module in set(re.findall(r"python3? -m ([A-Za-z_][\w.]*)", flat)):
            assert importlib.util.find_spec(module), f"{path} runs `python -m {module}`, which does not exist"
        for named in set(REPOSITORY_PATH.findall(flat)):
            named = named.rstrip(".")
            assert (REPO / named).exists(), f"{path} names {named}, which is not in the repository"
        for module, name in re.findall(r"from ((?:infra|tools|workload|bench)[\w.]*) import (\w+)", flat):
            assert hasattr(importlib.import_module(module), name), f"{path}: `from {module} import {name}` fails"


def test_the_outputs_tables_name_what_the_program_exports():
    exports = set(program("dev", (("trainEnabled", True),)).exports)
    full = {name for row in table(page("docs/declares.md"), "## The outputs")
            for name in re.findall(r"`(\w+)`", row[0])}
    assert full == exports, f"docs/declares.md's outputs: missing {exports - full}, not exported {full - exports}"
    short = {name for row in table(README, "### The outputs") for name in re.findall(r"`(\w+)`", row[0])}
    assert short == exports, f"the README's outputs: missing {exports - short}, not exported {short - exports}"


def test_the_costs_add_up_and_are_the_stacks_tables():
    costs = table(page("docs/cluster-setup.md"), "## What it costs")
    readme = {row[0]: row[5] for row in table(README, "### The stacks")}
    assert [row[0] for row in costs] == list(readme), (costs, readme)
    for stack, nodes, fixed, total in costs:
        settings = stack_settings(stack.strip("`"))
        count, instance_type, price = re.fullmatch(r"(\d+) x ([\w.]+): \d+ x (?:about )?\$([\d.]+)", nodes).groups()
        assert (int(count), instance_type) == (settings["gpuNodeCount"], settings["gpuInstanceType"]), (stack, nodes)
        fixed_cost = sum(float(figure) for figure in re.findall(r"\$([\d.]+)", fixed))
        hourly = float(re.fullmatch(r"\*\*\$([\d.]+)/h\*\*", total).group(1))
        assert hourly == pytest.approx(int(count) * float(price) + fixed_cost, abs=0.006), (stack, nodes, fixed, total)
        assert readme[stack] == f"${hourly:.2f}/h", f"the README's cost of {stack} is docs/cluster-setup.md's"
        assert fixed_cost == pytest.approx(0.35, abs=0.006), "the README's $0.35 for the rest"
    dev = float(readme["`dev`"].strip("$/h"))
    assert f"about ${dev:.2f} an hour for `dev`" in " ".join(README.split()), "the shortest path's figure"


def test_the_chat_run_sample_is_what_the_job_prints():
    """docs/local-run.md's two lines of a chat run: the data line is what the job logs for that run's flags, and
    the step line has the learning rate of the schedule's first step and the batch (its loss, examples and tokens
    are one run's: tests/runs/test_workload_train.py trains on chat data)."""
    text = page("docs/local-run.md")
    command = re.search(r"`(python -m workload\.local [^`]*--data_format chat[^`]*)`", text).group(1)
    cfg = local.parse_args(command.split()[3:])
    data_line, step_line = (re.sub(r"^\(RayTrainWorker pid=\d+\) ", "", line)
                            for line in sample_block(text, "## Conversations instead of text"))
    assert data_line == example_blocks(cfg).describe(cfg), data_line
    shape = re.fullmatch(r"step 1/(\d+) loss [\d.]+ lr ([\d.e+-]+) batch (\d+) examples \d+ trained_tokens \d+ "
                         r"step_time [\d.]+s tokens/s [\d,]+ mfu n/a", step_line)
    assert shape, step_line
    workers = int(re.search(r"--verbose` on (\d+) CPU workers", " ".join(text.split())).group(1))
    assert (int(shape.group(1)), shape.group(2), int(shape.group(3))) == (
        cfg.steps, f"{learning_rate_at(cfg, 0):.2e}", cfg.batch_size * workers), step_line


def test_the_pulumi_up_sample_is_what_the_program_registers():
    """docs/tools.md's `pulumi up`: each resource it shows (but the CLI's own stack) is one the program registers,
    under the component the tree shows it in, and the counts it gives are the program's under the mocks."""
    tools = page("docs/tools.md")
    with_job, without = program("dev", (("trainEnabled", True),)), program("dev")
    registered = {(re.sub(r"^(aws|random):(\w+)/\w+:", r"\1:\2:", r.type), r.name): r for r in with_job.resources}
    component = None
    rows = [re.match(r"^ \+ {3}(│  |)[├└]─ (\S+)\s+(\S+)\s+create$", line)
            for line in sample_block(tools, "`pulumi up` on `dev` with `trainEnabled`")]
    assert sum(row is not None for row in rows) > 10, rows
    for row in filter(None, rows):
        nested, type_, name = row.groups()
        resource = registered.get((type_, name))
        assert resource is not None, f"docs/tools.md shows {type_} {name}, which the program does not register"
        if nested:
            assert resource.parent == component.urn, f"{name} is a child of {component.name}"
        else:
            component = resource
    counts = re.search(r"registers (\d+) resources under the test suite's mocks, (\d+) without the job",
                       " ".join(tools.split())).groups()
    assert tuple(map(int, counts)) == (len(with_job.resources), len(without.resources)), counts
