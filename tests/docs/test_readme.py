"""The README, followed as a newcomer reads it: its command sequences in order, as a user types them, through the
same entry points, and its tables and samples against what the code does (tests/docs/test_docs.py does the same for
docs/, and tests/support/docs_shell.py holds the shell and stand-ins both follow the commands with).

- The first set-up line runs for real: `bash scripts/setup.sh && .venv/bin/python -m workload.local`; its output
  is the README's samples and docs/local-run.md's whole one, losses within LOSS_TOLERANCE.
- "The commands" (the real-cluster journey) runs in a copy of the project, against the stand-ins, and the
  finder-then-`pulumi up` flow runs for every stack file, with capacityReserve on and off.
- "Your model and your data": its record-format table is what the job's readers take, and its local commands parse
  and pass the checks made before Ray starts (tests/runs/test_workload_train.py trains on chat and prompt-completion
  data through the same job; the first set-up line trains on text).
- "The stacks": the table is the stack files and the instance types' facts.
"""
from __future__ import annotations

import csv
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pyarrow
import pyarrow.parquet
import pytest
import yaml

from infra.job.job_config import STACK_KEYS
from tests.support.docs_shell import (
    FENCED,
    PROJECT,
    REPO,
    RESERVATION,
    JourneyAws,
    Shell,
    bash_block,
    github_anchor,
    page,
    python_block,
    sample_block,
    table,
)
from tests.support.instance_facts import INSTANCE_FACTS
from tests.support.pulumi_mocks import SCHEMA, STACKS, stack_settings
from workload import cli
from workload.config import DATA_FORMATS, DATASET_FILE_SUFFIXES, SUMMARY_PREFIX, TrainConfig
from workload.data import records
from workload.data.batches import load_documents
from workload.data.chat import ROLES
from workload.run import checks as local_checks
from workload.run import local

README = page("README.md")
LOCAL_RUN = page("docs/local-run.md")
LOSS_TOLERANCE = 0.05
"""How far a loss the samples show may be from a run's. On one machine every run prints the same losses; on another
CPU or torch build the sums round in another order and the last digits differ (the samples' step 10 held-out loss
was 2.8122 on one machine and 2.8120 on another). A change to the recipe moves the losses by far more."""
CORPUS = (REPO / "data" / "corpus.txt").read_text().splitlines()


def yaml_file(path: Path) -> dict:
    """A stack file's config, as the finder left it."""
    return yaml.safe_load(path.read_text())["config"]


def test_the_contents_name_every_section_and_every_page():
    contents = README[README.index("## Contents"):README.index("\n## ", README.index("## Contents") + 1)]
    headings = re.findall(r"^#{2,3} (.+)$", FENCED.sub("", README), re.M)
    named = set(re.findall(r"\]\(#([^)]+)\)", contents))
    assert {github_anchor(heading) for heading in headings if heading != "Contents"} == named, (headings, named)
    more = README[README.index("## More, one page a topic"):]
    pages = {f"docs/{path.name}" for path in (REPO / "docs").glob("*.md")}
    assert set(re.findall(r"\]\((docs/[\w-]+\.md)\)", more)) == pages, "the README's last section lists every page"


# ---- the first set-up line --------------------------------------------------------------------------------

# What differs between two runs of the same command: ids, ports, timings, where the repository is.
RUN_TO_RUN = [
    (re.compile(r"raysubmit_\w+"), "raysubmit_ID"),
    (re.compile(r"http://127\.0\.0\.1:\d+"), "http://127.0.0.1:PORT"),
    (re.compile(r"\S*/local-\d{8}-\d{6}-\d+"), "RUN"),
    (re.compile(r"step_time [0-9.]+s tokens/s [0-9,]+"), "step_time Ts tokens/s N"),
    (re.compile(r"in \d+ s; "), "in T s; "),
    (re.compile(r"; [0-9,]+ tokens/s$"), "; N tokens/s"),
    (re.compile(r"(all_reduce|all_gather|reduce_scatter) [0-9.]+"), r"\1 B"),
    (re.compile(r"^TRAIN_SUMMARY .*"), "TRAIN_SUMMARY {...}"),
    (re.compile(r"held training [0-9.]+s"), "held training Ts"),
]
# What differs between machines, compared apart: the losses (within LOSS_TOLERANCE), and the line of the corpus the
# model completes the prompt with (any line of it).
LOSS = re.compile(r"(?:(?<=loss )|(?<=-> )|(?<=held-out ))\d+\.\d+")
GENERATION = re.compile(r"""(\.generate\('[^']*'\): )"(.*)"$""")


def _shape(line: str) -> tuple[str, list[float], str | None]:
    """A line as (what every run prints alike, its losses, its generated text)."""
    for pattern, replacement in RUN_TO_RUN:
        line = pattern.sub(replacement, line)
    losses = [float(loss) for loss in LOSS.findall(line)]
    generated = GENERATION.search(line)
    line = GENERATION.sub(r'\1"GENERATED"', LOSS.sub("LOSS", line))
    return line, losses, generated and generated.group(2)


def _same(shown: str, said: str) -> bool:
    (shown_line, shown_losses, _), (said_line, said_losses, _) = _shape(shown), _shape(said)
    return shown_line == said_line and shown_losses == pytest.approx(said_losses, abs=LOSS_TOLERANCE)


def check_example_output(block: list[str], printed: str, whole: bool) -> None:
    """A sample is a real run's output: each of its lines is a line the run printed, in order (losses within
    LOSS_TOLERANCE, the generation any line of the corpus); with `whole`, each kind of line the run printed (all
    but the elided steps) is in the sample too."""
    said = printed.splitlines()
    position = 0
    for line in block:
        found = next((index for index in range(position, len(said)) if _same(line, said[index])), None)
        assert found is not None, f"the sample shows {line!r}, which the run did not print (in that order):\n" \
                                  + "\n".join(said)
        generated = _shape(line)[2]
        assert generated is None or generated in CORPUS, f"the sample's generation is no line of the corpus: {line}"
        position = found + 1
    if whole:
        # Beside the elided steps, the lines whose number or place depends on the machine's speed: the heartbeat
        # while the workers start (none on a fast machine), and the end of a save in the background (after some step).
        elided = re.compile(r"^step \d+/\d+ (loss|eval_loss) |^waiting for workers: \d+ s$"
                            r"|^step \d+ checkpoint written and stored in the background in [0-9.]+s$")
        missing = [line for line in said if not elided.match(line) and not any(_same(shown, line) for shown in block)]
        assert not missing, f"the run printed lines the sample leaves out: {missing}"


@pytest.fixture
def runs_it_leaves():
    """The README's first command writes under the repository's runs/local/, as it says; the run directories this
    test made there are removed after it (a user's own runs stay)."""
    runs = REPO / "runs" / "local"
    before = set(runs.iterdir()) if runs.is_dir() else set()
    yield
    for made in (set(runs.iterdir()) if runs.is_dir() else set()) - before:
        shutil.rmtree(made, ignore_errors=True)


def test_the_readme_opens_with_the_two_set_up_commands_and_what_they_print():
    lines = README.splitlines()
    assert lines[0].startswith("# ") and lines[2] == "```bash" and lines[5] == "```", lines[:6]
    assert bash_block(README, lines[0]) == ["bash scripts/setup.sh", ".venv/bin/python -m workload.local",
                                            "bash scripts/setup.sh", ".venv/bin/python -m pytest -q"], lines[2:6]
    first_screen = "\n".join(lines[:40])
    assert "## What this is" in first_screen and first_screen.index("```\nstep 1/40 loss") < first_screen.index(
        "## What this is"), "what the commands print, then what this is, both on the first screen"
    assert f"allows {LOSS_TOLERANCE} on each loss" in " ".join(LOCAL_RUN.split()), "the pages state the tolerance"


def test_the_samples_are_compared_within_the_tolerance_and_no_further():
    printed = "\n".join(["step 1/40 loss 6.2774 lr 1.25e-03 batch 8 step_time 0.404s tokens/s 1,267 mfu n/a",
                         "step 10/40 eval_loss 2.8120",
                         "from_pretrained(/x/runs/local/local-20261203-074832-7087/model_000040)"
                         ".generate('the cat'): \"the cat sees the house .\"",
                         "done: steps 1..40 on 2 x cpu in 67 s; loss 6.2774 -> 0.9616, held-out 0.9649; "
                         "6,939 tokens/s"])
    check_example_output(["step 10/40 eval_loss 2.8122",  # another machine's last digits
                          "from_pretrained(/home/you/raytrain-eks/runs/local/local-20261201-160303-30396/model_000040)"
                          ".generate('the cat'): \"the cat chases the river .\"",  # another line of the corpus
                          "done: steps 1..40 on 2 x cpu in 39 s; loss 6.2774 -> 0.9551, held-out 0.9589; "
                          "11,738 tokens/s"],
                         printed, whole=False)
    for wrong in ("step 10/40 eval_loss 2.8700",  # beyond the tolerance
                  "step 10/40 loss 2.8120",  # another kind of line
                  "step 1/40 loss 6.2774 lr 2.50e-03 batch 8 step_time 0.404s tokens/s 1,267 mfu n/a",  # another lr
                  # no line of the corpus:
                  "from_pretrained(/x/model_000040).generate('the cat'): \"the cat sees the moon .\""):
        with pytest.raises(AssertionError):
            check_example_output([wrong], printed, whole=False)
    with pytest.raises(AssertionError, match="leaves out"):
        check_example_output(["step 10/40 eval_loss 2.8120"], printed, whole=True)


def test_the_first_set_up_command_as_written(tmp_path, runs_it_leaves):
    """`bash scripts/setup.sh && .venv/bin/python -m workload.local`: a second setup installs nothing, and the local
    run's output is what the README and docs/local-run.md show: the losses, the exported model's generation, the
    picture of its curves. The model it exported then loads as the real-cluster section loads its own."""
    command = bash_block(README, "# Ray Train + FSDP on EKS with EFA")[:2]
    assert command == ["bash scripts/setup.sh", ".venv/bin/python -m workload.local"], command
    done = subprocess.run(" && ".join(command), shell=True, cwd=REPO, capture_output=True, text=True, timeout=900)
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-4000:]
    for unwanted in ("Traceback", "deprecated", "PreemptionWatcher", "Reporting training result", " INFO "):
        assert unwanted not in output, f"the local run must not print {unwanted!r}:\n{output[-4000:]}"
    # The samples are the local run's output; setup.sh's own `setup:` lines come first (tests/runs/test_setup.py).
    run_output = "\n".join(line for line in done.stdout.splitlines() if not line.startswith("setup: "))
    check_example_output(sample_block(README, "# Ray Train + FSDP on EKS with EFA"), run_output, whole=False)
    check_example_output(sample_block(README, "## The local run"), run_output, whole=False)
    whole_sample = sample_block(LOCAL_RUN, "## Its output")
    check_example_output(whole_sample, run_output, whole=True)
    summaries = [line for line in done.stdout.splitlines() if line.startswith(SUMMARY_PREFIX)]
    assert len(summaries) == 1 and done.stdout.splitlines()[-1] == summaries[0], "the summary once, as the last line"
    summary = json.loads(summaries[0][len(SUMMARY_PREFIX):])
    steps = summary["steps"]
    losses = [float(m) for m in re.findall(rf"step \d+/{steps} loss ([0-9.]+)", done.stdout)]
    assert len(losses) == steps and summary["final_loss"] < 0.75 * losses[0], f"the loss must visibly fall: {losses}"
    evaluations = [float(m) for m in re.findall(rf"step \d+/{steps} eval_loss ([0-9.]+)", done.stdout)]
    assert evaluations == sorted(evaluations, reverse=True) and evaluations[-1] < 0.75 * losses[0], (
        f"the held-out loss must fall too: {evaluations}")
    for text in (README, LOCAL_RUN):
        shown = [float(m) for m in re.findall(rf"step (?:1|{steps})/{steps} loss ([0-9.]+)", text)]
        assert shown == pytest.approx([losses[0], losses[-1]], abs=LOSS_TOLERANCE), (
            f"the example losses {shown} must be what a run prints: {losses[0]}, {losses[-1]}")
        shown_eval = [float(m) for m in re.findall(rf"step {steps}/{steps} eval_loss ([0-9.]+)", text)]
        assert shown_eval == pytest.approx([evaluations[-1]], abs=LOSS_TOLERANCE), (shown_eval, evaluations)

    # The generation: a line of the corpus, completed by the exported model loaded with from_pretrained.
    (generated,) = re.findall(r'^from_pretrained\((.+)\)\.generate\(\'the cat\'\): (".*")$', done.stdout, re.M)
    assert generated[0] == summary["model"], f"the model the summary names is the one that generates: {generated}"
    assert json.loads(generated[1]) in CORPUS, f"after its steps the model completes a corpus line: {generated}"
    assert re.search(r'\.generate\(\'the cat\'\): "the cat [a-z ]+ \."', README), "and the README shows one"

    # The README's picture is tools.loss_curve's drawing of a run like this one: every step, every evaluation.
    picture = re.search(r"!\[[^]]*\]\((docs/[^)]+\.svg)\)", README).group(1)
    lines = re.findall(r'<polyline [^>]*points="([^"]*)"><title>([^<]*)</title>', (REPO / picture).read_text())
    drawn = {name: len(points.split()) for points, name in lines}
    assert drawn == {"training loss": steps, "held-out loss": len(evaluations), "learning rate": steps}, drawn
    from tools import loss_curve

    run_directory = os.path.dirname(summary["tensorboard"])
    assert loss_curve.main([run_directory, "--out", str(tmp_path / "run.svg")]) == cli.OK
    assert re.findall(r"<polyline", (tmp_path / "run.svg").read_text()) == ["<polyline"] * 3, "the tool redraws it"

    # The real-cluster section's loading code, on this run's model in place of the one synced from S3.
    (tmp_path / "qwen-wikitext").symlink_to(summary["model"])
    loaded = subprocess.run([sys.executable, "-c", python_block(README, "### The commands")], cwd=tmp_path,
                            capture_output=True, text=True, timeout=300)
    assert loaded.returncode == 0 and loaded.stdout.startswith("The history of the"), loaded.stderr[-3000:]


# ---- a real cluster: `pulumi up` --------------------------------------------------------------------------

def test_the_real_cluster_journey_as_written(project, aws_env, kube_api):
    region = stack_settings("dev")["aws:region"]
    shell = Shell(project, JourneyAws(region), kube_api)
    commands = bash_block(README, "### The commands")
    assert any("tools.capacity" in c for c in commands) and "pulumi up" in commands, commands
    for command in commands:
        shell(command)
        if "tools.capacity" in command:
            written = yaml_file(project / "Pulumi.dev.yaml")
            assert written["aws:region"] == region and written[f"{PROJECT}:gpuAvailabilityZone"] == f"{region}b", (
                f"the finder's best AZ (the best Spot score) goes into the stack file: {written}")
            assert f"{PROJECT}:capacityCandidateAzs" not in written, "dev reserves nothing: no candidate list"
            shown = [line for line in sample_block(page("docs/tools.md"),
                                                   "`python -m tools.capacity --instance-type g6.12xlarge")
                     if line.startswith(("rank ", "1 ", "2 ", "Wrote "))]
            # Columns are as wide as their widest cell: the sample searched two regions, this every region.
            printed = [" ".join(line.split()) for line in shell.outputs[-1].splitlines()]
            assert len(shown) == 4 and all(" ".join(line.split()) in printed for line in shown), (
                f"docs/tools.md's sample of the finder is what it prints: {shown}\n{shell.outputs[-1]}")
    assert shell.run is None, "the README's journey ends with pulumi destroy"


@pytest.mark.parametrize("reserve", [False, True], ids=["on-demand", "capacityReserve"])
@pytest.mark.parametrize("stack", STACKS)
def test_the_finder_then_pulumi_up_for_every_stack(project, aws_env, stack, reserve):
    settings = stack_settings(stack)
    instance_type, count, region = settings["gpuInstanceType"], settings["gpuNodeCount"], settings["aws:region"]
    shell = Shell(project, JourneyAws(region))
    shell(f"pulumi stack select {stack}")
    shell(f"pulumi config set capacityReserve {str(reserve).lower()}")
    finder_line = next(c for c in bash_block(README, "### The commands") if "tools.capacity" in c)
    shell(re.sub(r"--instance-type \S+ --count \S+ --write-stack \S+",
                 f"--instance-type {instance_type} --count {count} --write-stack {stack}", finder_line))
    written = yaml_file(project / f"Pulumi.{stack}.yaml")
    best = written[f"{PROJECT}:gpuAvailabilityZone"]
    shell("pulumi up")
    run = shell.run
    assert run.exports["gpuAvailabilityZone"] == best, f"{stack}: the GPU nodes land where the finder pointed"
    if reserve:
        (reservation_,) = run.of_type(RESERVATION)
        assert reservation_.inputs["candidate_azs"] == written[f"{PROJECT}:capacityCandidateAzs"], (
            f"{stack}: the reservation tries the finder's ranking in order")
        assert reservation_.inputs["candidate_azs"][0] == best
    else:
        assert f"{PROJECT}:capacityCandidateAzs" not in written, f"{stack}: no candidate list without a reservation"
        assert not run.of_type(RESERVATION), f"{stack}: nothing reserved"


def test_the_stacks_table_is_the_stack_files():
    rows = {row[0].strip("`"): row for row in table(README, "### The stacks")}
    assert sorted(rows) == STACKS, f"the table lists every stack file: {sorted(rows)} vs {STACKS}"
    for stack, (_, nodes, gpus, efa, region, _cost, notes) in rows.items():
        settings = stack_settings(stack)
        facts = INSTANCE_FACTS[settings["gpuInstanceType"]]
        count = settings["gpuNodeCount"]
        assert nodes == f"{count} x {settings['gpuInstanceType']}", (stack, nodes)
        assert re.fullmatch(rf"{count * facts.gpus} x {facts.gpu_name} \d+ GB", gpus), (stack, gpus, facts)
        assert int(efa) == facts.maximum_efa_interfaces and region == settings["aws:region"], (stack, efa, region)
        assert ("`capacityReserve: true`" in notes) == bool(settings["capacityReserve"]), (stack, notes)
    dev = stack_settings("dev")
    quota = INSTANCE_FACTS[dev["gpuInstanceType"]].vcpus * dev["gpuNodeCount"]
    assert f"{quota} vCPUs (G and VT) for `dev`'s {dev['gpuNodeCount']} x {dev['gpuInstanceType']}" in README, quota


# ---- your model and your data -----------------------------------------------------------------------------

KEY_OF = STACK_KEYS  # the workload's flag (its field name) -> the stack key that sets it
FLAG_OF = {key: flag for flag, key in KEY_OF.items()}
ANSWERS = {"system": "answer in one line .", "user": "the cat sees what ?", "assistant": "the cat sees the ball ."}


def _record(shown: str, fields: dict[str, str]) -> dict:
    """The table's record with its `...` filled in: a turn's content by its role, a string field by its name."""
    record = json.loads(shown)
    for name, value in record.items():
        if isinstance(value, list):  # OpenAI's {role, content} turns, or ShareGPT's {from, value}
            record[name] = [{**turn, "content": ANSWERS[turn["role"]]} if "role" in turn else
                            {**turn, "value": ANSWERS[{"human": "user", "gpt": "assistant"}[turn["from"]]]}
                            for turn in value]
        else:
            record[name] = fields.get(name, f"the {name} .")
    return record


def _write(path: Path, record: dict) -> None:
    if path.suffix == ".jsonl":
        path.write_text(json.dumps(record) + "\n")
    elif path.suffix == ".json":
        path.write_text(json.dumps([record]))
    elif path.suffix == ".csv":
        with path.open("w", newline="") as file:
            writer = csv.DictWriter(file, fieldnames=list(record))
            writer.writeheader()
            writer.writerow(record)
    else:
        pyarrow.parquet.write_table(pyarrow.Table.from_pylist([record]), path)


def test_the_record_formats_table_is_what_the_job_reads(tmp_path, monkeypatch):
    """Each row's record, written as each file it names (and served as a Hub dataset), read by the job's own readers
    with the flags the local run sets: the text it trains on, or the conversation and the turns that carry loss."""
    import datasets

    rows = table(README, "## Your model and your data")
    assert {row[0].split()[0].strip("`") for row in rows} == set(DATA_FORMATS), rows
    hub_records: list[dict] = []
    monkeypatch.setattr(datasets, "load_dataset", lambda *args, **kwargs: datasets.Dataset.from_list(hub_records))
    for data_format_cell, sources, shown, trains_on, keys in rows:
        data_format = data_format_cell.split()[0].strip("`")
        suffixes = re.findall(r"`(\.\w+)`", sources)
        expected = set(DATASET_FILE_SUFFIXES) if data_format == "text" else set(DATASET_FILE_SUFFIXES) - {".txt"}
        assert set(suffixes) <= expected and ("a Hub dataset" in sources) == (suffixes != [".txt"]), sources
        flags = [FLAG_OF[key] for key in re.findall(r"`(train\w+)`", keys)]
        for flag in flags:  # the field the record shows is the flag's default and the stack key's
            assert flag.removesuffix("_field") in json.loads(re.search(r"`(\{.*\})`", shown).group(1)), (flag, shown)
            assert getattr(TrainConfig, flag) == flag.removesuffix("_field") == SCHEMA[KEY_OF[flag]]["default"]
        for source in [*suffixes, *(["hub"] if "a Hub dataset" in sources else [])]:
            path = tmp_path / f"records{source if source != 'hub' else '.jsonl'}"
            if source == ".txt":
                path.write_text("the cat sees the ball .\n\nthe dog likes the tree .\n")
                assert shown == "a line: one document" and trains_on == "every token", shown
                assert load_documents(local.parse_args(["--dataset", str(path)])) == [
                    "the cat sees the ball .", "the dog likes the tree ."]
                continue
            record = _record(re.search(r"`(\{.*\})`", shown).group(1), {"text": "the cat sees the ball ."})
            if source == "hub":
                hub_records[:] = [record]
                dataset = "someone/records"
            else:
                _write(path, record)
                dataset = str(path)
            cfg = local.parse_args(["--dataset", dataset, "--data_format", data_format])
            if data_format == "text":
                assert load_documents(cfg) == ["the cat sees the ball ."] and trains_on == "every token", source
                continue
            ((turns, trained),) = records.conversations(cfg, records.read_records(cfg))
            assert [turn["role"] for turn in turns] == ["user", "assistant"] and trained == [1], (source, turns)
            assert trains_on == ("the assistant's turns" if data_format == "chat" else "the completion"), trains_on
    for data_format in set(DATA_FORMATS) - {"text"}:
        with pytest.raises(ValueError, match="plain text"):
            local.parse_args(["--dataset", str(tmp_path / "records.txt"), "--data_format", data_format])
    roles = re.search(r"a turn's role is (.+?)\. ", " ".join(README.split())).group(1)
    assert re.findall(r"`(\w+)`", roles) == list(ROLES), roles


def test_the_local_data_commands_as_written():
    """"Try yours here first": each command's flags as workload.local parses them, and the checks it makes before
    Ray starts, on the files it names; the records of each read as the job reads them."""
    commands = bash_block(README, "## Your model and your data")
    assert len(commands) == 3, commands
    for command in commands:
        argv = shlex.split(command)
        assert argv[:3] == [".venv/bin/python", "-m", "workload.local"], argv
        cfg = local.parse_args(argv[3:])
        local_checks.check_dataset(cfg)
        if cfg.data_format == "text":
            assert cfg.dataset == str(REPO / "data" / "corpus.jsonl") and cfg.text_field == "body", cfg
            assert load_documents(cfg)[0] == "the cat sees the ball .", "the field holds the corpus' lines"
        else:
            named = {"chat": "conversations.jsonl", "prompt-completion": "instructions.jsonl"}[cfg.data_format]
            assert os.path.basename(cfg.dataset) == named and f"`data/{named}`" in README, cfg.dataset
            conversations = records.conversations(cfg, records.read_records(cfg))
            assert conversations and all(trained for _, trained in conversations), cfg.data_format
