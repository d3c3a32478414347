"""The training data: batches of token ids for every (step, rank), raw text or supervised examples (chat and
prompt-completion records rendered with the chat template, masked, packed). May import workload's base and .model.

    batches.py    the batches of a run: random tokens, packed text, or packed examples; sharded and dealt to the steps
    tokenizer.py  the run's tokenizer, with the chat template for chat data
    tokenizer_size.py  a tokenizer's size from its tokenizer.json or vocab.json (no transformers), against the
                  model's vocab_size
    validate.py   every record of a dataset file read and checked, streaming, before anything starts (shared by the
                  local run, the job's driver and the preview); the files' formats (.jsonl/.json/.csv/.parquet/.txt, .gz)
    shapes.py     a record's shape (OpenAI messages, ShareGPT, prompt-completion, Alpaca) read as a conversation
    records.py    the records of --dataset as conversations (a file, local or s3://, or a Hugging Face dataset)
    hub_dataset.py  a Hugging Face dataset's split checked before a model loads: its first file, bounded
    hub_splits.py the splits a Hub dataset repo has and their files, as datasets resolves them without a script
    hub_card.py   a Hub dataset's README card as load_dataset parses it, and what in it load_dataset fails on
    hub_columns.py  a Hub dataset split's later files' columns against its first (bounded ranged reads)
    hub_formats.py  the builder datasets infers for each of a Hub dataset's splits (one format for all, or it fails)
    hub_features.py a Hub dataset card's declared features against the train split's first record
    chat.py       render with the chat template; the exact tokens of the assistant turns
    packing.py    truncate or split over-long examples; pack with per-example positions; TokenBatch
    examples.py   the examples of --dataset, shuffled, held out and packed
    stage.py      the data stage: --dataset read, rendered and tokenized once by Ray Data on the cluster's CPUs, before
                  any worker starts, and packed into token shards (or found in the cache)
    cache.py      the shards' cache key, where they are kept (beside the run, or RAYTRAIN_DATA_CACHE), and how a
                  directory of them is published whole and copied to a node once
    shards.py     the token shards: the streams packed into fixed-width int32 arrays, read back memory-mapped

Nothing is imported here, so the Pulumi program reads chat.py's facts about tokenizers without importing torch.
"""
