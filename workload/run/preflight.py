"""The job's checks before any worker starts, cheapest first: `validate` is what the job's driver
(`python -m workload.train`) and `python -m workload.local` run once the flags have parsed.

What needs only the flags and a config known without a download (--model_config's, or the config.json the project
ships for a --model_id, workload.model.architectures) answers before torch, transformers and Ray load: a --seq_len
above the model's positions is one line in a fraction of a second, not after seconds of imports. Then the data files
(standard library), then what needs transformers: the model's own config.json and the model gate, the tokenizer.
"""
from __future__ import annotations

from workload import cli
from workload.config import TrainConfig
from workload.data import hub_dataset
from workload.data import validate as records_check
from workload.model import adapters, model_source, structure


def check_positions(cfg: TrainConfig, max_positions: int) -> None:
    """--seq_len against the model's maximum positions (config.json's max_position_embeddings)."""
    if cfg.seq_len > max_positions:
        raise ValueError(f"--seq_len {cfg.seq_len} is above the model's maximum of {max_positions} positions "
                         f"({cfg.model_config or cfg.model_id})")


def check_targets(cfg: TrainConfig, architecture: dict) -> None:
    """--lora_targets against the model's linear layers (workload.model.adapters.resolve): one line naming the flag
    and the names the model has."""
    adapters.resolve(cfg.lora_targets, structure.linear_names(architecture))


def validate(cfg: TrainConfig) -> None:
    """The checks that need the model's config or the tokenizer, and every record of a --dataset file
    (workload.data.validate) or the first file of a Hub --dataset's split, before any worker loads the model."""
    known = cfg.architecture  # a dict, without transformers: --model_config's, or a shipped --model_id's
    if known and "max_position_embeddings" in known:
        check_positions(cfg, known["max_position_embeddings"])
    if known and cfg.method != "full":
        check_targets(cfg, known)
    # Refusals only: the local run has said what the file holds, and on a cluster rank 0's data line says it.
    records_check.check_dataset(cfg, say=lambda line: None)
    hub_dataset.check_dataset(cfg)  # a Hub dataset's split: its first file, bounded (workload.data.hub_dataset)

    # Seconds of imports from here on: torch and transformers.
    from workload.data.batches import check_dataset, check_tokenizer
    from workload.model import compatibility
    from workload.model.build import hf_config

    check_dataset(cfg)  # a remote --dataset file, with the driver's credentials
    config = hf_config(cfg)
    # The model gate, as the preview ran it and every worker will: the model on the meta device, whose linear layers
    # --lora_targets must name (PEFT would fail inside Ray otherwise, with NoMatchingPeftModuleError).
    built = compatibility.build(config, f"--model_id {cfg.model_config or cfg.model_id}")
    if cfg.method != "full":
        check_targets(cfg, structure.attach(config.to_dict(), built))
    check_positions(cfg, config.max_position_embeddings)
    if cfg.dataset:  # the tokenizer is loaded for a dataset only (random tokens need none)
        try:  # one request first: transformers would retry an unreachable Hub for a minute
            model_source.check_hub_reachable(cfg.tokenizer_name)
        except (model_source.Unreachable, model_source.NeedsToken) as error:
            flag = "--tokenizer" if cfg.tokenizer else "--model_id"
            raise cli.EnvironmentProblem(f"{flag} {cfg.tokenizer_name} (its tokenizer): {error}") from None
    check_tokenizer(cfg, config.vocab_size)
