"""The training data: batches of token ids for every (step, rank), raw text or supervised examples (chat and
prompt-completion records rendered with the chat template, masked, packed). May import workload's base and .model.

    batches.py    the batches of a run: random tokens, packed text, or packed examples; sharded and dealt to the steps
    tokenizer.py  the run's tokenizer, with the chat template for chat data
    records.py    read and check records (.jsonl/.json/.parquet, local or s3://, or a Hugging Face dataset)
    chat.py       render with the chat template; the exact tokens of the assistant turns
    packing.py    truncate or split over-long examples; pack with per-example positions; TokenBatch
    examples.py   the examples of --dataset, shuffled, held out and packed

Nothing is imported here, so the Pulumi program reads chat.py's facts about tokenizers without importing torch.
"""
