"""Supervised fine-tuning data: chat and prompt-completion records, rendered with the chat template, masked so only
the assistant's tokens carry loss, and packed into blocks without leakage between examples.

    records.py  read and check records (.jsonl/.json/.parquet, local or s3://, or a Hugging Face dataset)
    chat.py     render with the chat template; the exact tokens of the assistant turns
    packing.py  truncate or split over-long examples; pack with per-example positions; TokenBatch
    dataset.py  the examples of --dataset, shuffled, held out and packed

`dataset.dataset_blocks(cfg)` is the entry point workload/data/batches.py calls for --data_format chat and prompt-completion: the
examples are shuffled with the run's seed, --eval_fraction of them (not of the blocks: no example is cut between
the two sets) held out, and each set packed. The blocks are then sharded and dealt to the steps exactly as text
blocks are.

Nothing is imported here, so the Pulumi program reads chat.py's facts about tokenizers without importing torch.
"""
