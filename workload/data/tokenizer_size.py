"""How many tokens a tokenizer has, read from its tokenizer.json alone, and whether the model's embedding holds them:
the rule "tokenizer vs vocabulary" that the preview (trainTokenizer, trainModelId) and the job's driver before Ray
(--tokenizer, --model_id) share. A tokenizer larger than config.json's vocab_size yields ids past the embedding's last
row, and the first batch that holds one fails inside the GPU kernel (an index out of range, after the nodes bill).

transformers' len(tokenizer) for a fast tokenizer is tokenizers' get_vocab_size(with_added_tokens=True): the model's
vocabulary (tokenizer.json's model.vocab: a {token: id} map for BPE, WordPiece and WordLevel, a [[piece, score], ...]
list for Unigram, ids by position) with the added tokens (added_tokens: [{"id", "content", ...}]) not already in it.
The embedding is indexed by id, so the size counted here is the larger of that count and the highest id + 1; for
every published tokenizer the two agree.

A tokenizer.json from the Hub, S3 or a directory is untrusted input: bounded before it is parsed (MAX_TOKENIZER_BYTES;
the largest published, Gemma 3's of 262,144 tokens, is 33 MB), then checked field by field. A tokenizer given as the
slow BPE files alone (vocab.json and merges.txt, no tokenizer.json) is sized from vocab.json: transformers' len() of it
(tokenization_python.py's __len__, and the fast tokenizer convert_slow_tokenizer builds from the same files) counts
its {token: id} entries with tokenizer_config.json's added_tokens_decoder ({"<id>": {"content", ...}}) not already in
it (size_of_vocab); a WordPiece one (vocab.txt) by its lines (size_of_wordpiece); a sentencepiece-only one
(tokenizer.model) by its pieces, a lower bound of len() (workload/data/sentencepiece_size.py), its model not readable
here being NotSized: the job's transformers check says; except a directory's only tokenizer file that is neither a
sentencepiece model nor a tiktoken file, which nothing loads (a ValueError naming it: the local run and the job's
driver refuse it before the imports). The preview, sizing a Hub repo's files, keeps that one a warning: the job's
driver refuses it in under a second, and a repo read at preview may change before the run.
A repo with none of the files a tokenizer loads from (TOKENIZER_FILES) cannot be loaded at all: AutoTokenizer.
from_pretrained raises OSError "Can't load tokenizer for '<id>'" (tokenization_utils_base.py), in the data stage.
Standard library only (the Pulumi program imports it).
"""
from __future__ import annotations

import json
import os
import sys
from typing import Any

from workload import user_files
from workload.data import bpe_merges, sentencepiece_size, tokenizer_fields

TOKENIZER_FILE = "tokenizer.json"
# A slow BPE tokenizer's files (GPT-2's), sized when there is no tokenizer.json.
VOCAB_FILE, ADDED_TOKENS_FILE, TOKENIZER_CONFIG_FILE = "vocab.json", "added_tokens.json", "tokenizer_config.json"
SPECIAL_TOKEN_FIELDS = ("bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token",
                        "additional_special_tokens")
# The files transformers' tokenizer classes load from (their vocab_files_names, and tokenizer_config.json): a repo
# holding none of them at its root, nor a *.model (sentencepiece) or *.tiktoken file, has no tokenizer.
TOKENIZER_FILES = frozenset({TOKENIZER_FILE, TOKENIZER_CONFIG_FILE, VOCAB_FILE, "vocab.txt", "merges.txt",
                             "tokenizer.model", "spiece.model", "sentencepiece.bpe.model", "special_tokens_map.json"})
MAX_TOKENIZER_BYTES = 64 << 20
# len(AutoTokenizer.from_pretrained(id)) of the shipped models' own tokenizers (workload/model/architectures), so the
# preview sizes them without a download: Qwen2.5's 151,643 byte-level BPE tokens and 22 added special tokens; Qwen3's
# 26 (with <think>, </think>, <tool_response>, </tool_response>); Llama 3's 128,000 and 256 reserved special tokens;
# Mistral v0.3's 32,768 (its 768 control tokens inside model.vocab). Each is at most its config.json's vocab_size
# (tests/unit/test_tokenizer_size.py).
KNOWN_SIZES = {
    **{f"Qwen/Qwen2.5-{size}{suffix}": 151_665 for size in ("0.5B", "1.5B", "3B", "7B", "14B", "32B", "72B")
       for suffix in ("", "-Instruct")},
    **{f"Qwen/Qwen3-{size}": 151_669 for size in ("0.6B", "1.7B", "4B", "8B", "14B", "32B")},
    **{model: 128_256 for model in ("meta-llama/Llama-3.1-8B", "meta-llama/Llama-3.1-70B", "meta-llama/Llama-3.2-1B",
                                    "meta-llama/Llama-3.2-3B", "meta-llama/Llama-3.3-70B-Instruct",
                                    "meta-llama/Meta-Llama-3-8B-Instruct")},
    "mistralai/Mistral-7B-v0.3": 32_768,
}


# The JSON files AutoTokenizer.from_pretrained opens with json.load (transformers tokenization_utils_base.py
# _from_pretrained: tokenizer_config.json always, models/auto/tokenization_auto.py get_tokenizer_config too;
# special_tokens_map.json when tokenizer_config.json has no added_tokens_decoder, the legacy layout), beside
# tokenizer.json, vocab.json and added_tokens.json, which the sizes above parse: one that is not a JSON object fails
# the load (JSONDecodeError, or AttributeError on .items()) in the data stage, after the nodes bill.
SPECIAL_TOKENS_FILE = "special_tokens_map.json"
JSON_NOT_LOADED = ("allowed: a JSON object, as tokenizer.save_pretrained writes it (AutoTokenizer.from_pretrained "
                   "json.loads it)")


def json_object_problem(data: bytes) -> str | None:
    """Why a tokenizer's JSON file cannot be json.loaded into an object (after "is"), or None. As transformers opens
    it, open(encoding="utf-8") then json.load: a UTF-8 byte order mark is refused too ("Unexpected UTF-8 BOM")."""
    if data.startswith(b"\xef\xbb\xbf"):
        return "UTF-8 JSON behind a byte order mark, which json.load refuses (Unexpected UTF-8 BOM)"
    try:
        document = json.loads(data.decode("utf-8"))
    except (ValueError, RecursionError):
        return "not UTF-8 JSON"
    return None if isinstance(document, dict) else f"a JSON {type(document).__name__}, not an object"


class NotSized(Exception):
    """The tokenizer's size cannot be read from its files (no tokenizer.json); the caller leaves it to transformers."""


def size_problem(size: int) -> str | None:
    """Why a tokenizer.json of `size` bytes is refused before it is parsed, or None."""
    if size > MAX_TOKENIZER_BYTES:
        return (f"is {size:,} bytes; the largest published {TOKENIZER_FILE} is 33 MB (allowed: at most "
                f"{MAX_TOKENIZER_BYTES:,})")
    return None


def size_of(data: bytes) -> int:
    """The tokens of a tokenizer.json's text (see the module docstring); ValueError naming what is wrong with it."""
    if (why := size_problem(len(data))) is not None:
        raise ValueError(why)
    try:
        document = json.loads(data.decode("utf-8-sig"))
    except (ValueError, RecursionError):
        raise ValueError("is not UTF-8 JSON") from None
    model = document.get("model") if isinstance(document, dict) else None
    vocab = model.get("vocab") if isinstance(model, dict) else None
    if isinstance(vocab, dict):
        ids = list(vocab.values())
        names = set(vocab)
        if (why := bpe_merges.problem(model, vocab)) is not None:  # tokenizers' BpeBuilder::build would fail
            raise ValueError(why)
    elif isinstance(vocab, list):  # Unigram: [piece, score] pairs, the id is the position
        ids = list(range(len(vocab)))
        names = {entry[0] for entry in vocab if isinstance(entry, list) and entry and isinstance(entry[0], str)}
    else:
        raise ValueError("has no model.vocab (a {token: id} map or a list of [piece, score])")
    added = document.get("added_tokens") or []
    if not isinstance(added, list):
        raise ValueError("has an added_tokens that is not a list")
    for token in added:
        if not isinstance(token, dict) or not isinstance(token.get("content"), str):
            raise ValueError("has an added token without its content")
        if token["content"] not in names:
            names.add(token["content"])
            ids.append(token.get("id"))
    return _count(names, ids)


def load_problem(data: bytes) -> str | None:
    """Why the tokenizers library (the one transformers' fast tokenizers load tokenizer.json with, imported in
    milliseconds and without torch) cannot build the tokenizer of a tokenizer.json's bytes, or None: a pre-tokenizer's
    regex Oniguruma refuses, a model or normalizer it cannot make. AutoTokenizer fails on the same file after seconds
    of imports, in every worker."""
    import tokenizers

    sys.stderr.flush()
    saved, quiet = os.dup(2), os.open(os.devnull, os.O_WRONLY)
    os.dup2(quiet, 2)  # a panic's message and Rust backtrace go to fd 2: not the user's to read; the refusal says it
    try:
        tokenizers.Tokenizer.from_str(data.decode("utf-8-sig"))
    except (KeyboardInterrupt, SystemExit):
        raise
    except BaseException as error:  # noqa: BLE001  (tokenizers raises plain Exception with its Rust error's text, and
        # a malformed file can panic its Rust code: pyo3's PanicException derives from BaseException)
        said = "".join(c if c.isprintable() else " " for c in str(error)[:200])
        return f"does not load in the tokenizers library ({said})"
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(quiet)
    return None


def _count(names: set[str], ids: list[Any]) -> int:
    if not all(isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in ids):
        raise ValueError("has a token id that is not a non-negative integer")
    return max(len(names), max(ids, default=-1) + 1)


def size_of_vocab(vocab: bytes, tokenizer_config: bytes | None = None, added_tokens: bytes | None = None) -> int:
    """The tokens of a slow BPE tokenizer: vocab.json's {token: id} entries with the added tokens not already among
    them (_size_of_entries); ValueError naming what is wrong."""
    if (why := size_problem(len(vocab))) is not None:
        raise ValueError(why.replace(TOKENIZER_FILE, VOCAB_FILE))
    entries = _json_document(vocab, VOCAB_FILE)
    if not isinstance(entries, dict):
        raise ValueError(f"({VOCAB_FILE}) is not a {{token: id}} map")
    return _size_of_entries(entries, tokenizer_config, added_tokens)


def _json_document(data: bytes, name: str) -> Any:
    try:
        return json.loads(data.decode("utf-8-sig"))
    except (ValueError, RecursionError):
        raise ValueError(f"({name}) is not UTF-8 JSON") from None


def _size_of_entries(entries: dict, tokenizer_config: bytes | None, added_tokens: bytes | None = None) -> int:
    """A {token: id} vocabulary with the tokens a slow tokenizer adds as it loads, those not already in it counted as
    _count counts: added_tokens.json's ({token: id}), tokenizer_config.json's added_tokens_decoder ({id: {"content"}})
    and the special tokens it names (SPECIAL_TOKEN_FIELDS: added after the last id when missing). ValueError naming
    the file that is not so."""
    names, ids = set(entries), list(entries.values())
    added: list[tuple[Any, Any]] = []
    if added_tokens is not None:
        document = _json_document(added_tokens, ADDED_TOKENS_FILE)
        if not isinstance(document, dict):
            raise ValueError(f"({ADDED_TOKENS_FILE}) is not a {{token: id}} map")
        added += list(document.items())
    config = _json_document(tokenizer_config, TOKENIZER_CONFIG_FILE) if tokenizer_config is not None else {}
    config = config if isinstance(config, dict) else {}
    decoder = config.get("added_tokens_decoder")
    for number, token in decoder.items() if isinstance(decoder, dict) else ():
        content = token.get("content") if isinstance(token, dict) else None
        if not isinstance(content, str) or not str(number).isdigit():
            raise ValueError(f"({TOKENIZER_CONFIG_FILE}) has an added token without its content or id")
        added.append((content, int(number)))
    for name in SPECIAL_TOKEN_FIELDS:
        values = config.get(name)
        for value in (values if isinstance(values, list) else [values] if values is not None else []):
            added.append((value.get("content") if isinstance(value, dict) else value, None))
    for content, token_id in added:
        if not isinstance(content, str):
            raise ValueError("has an added token without its content")
        if content not in names:
            names.add(content)
            if token_id is not None:
                ids.append(token_id)
    try:
        return _count(names, ids)
    except ValueError as error:
        raise ValueError(f"({VOCAB_FILE}) {error}") from None


# A WordPiece tokenizer's vocabulary (BERT's): one token a line, its id the line's number (transformers'
# models/bert/tokenization_bert.py load_vocab: a later line of the same token takes its id).
WORDPIECE_FILE = "vocab.txt"


def size_of_wordpiece(vocab_txt: bytes, tokenizer_config: bytes | None = None) -> int:
    """The tokens of a WordPiece tokenizer: vocab.txt's distinct lines with tokenizer_config.json's added tokens not
    among them, counted as size_of_vocab counts; ValueError naming what is wrong."""
    if (why := size_problem(len(vocab_txt))) is not None:
        raise ValueError(why.replace(TOKENIZER_FILE, WORDPIECE_FILE))
    try:
        lines = vocab_txt.decode("utf-8").split("\n")
    except UnicodeDecodeError:
        raise ValueError(f"({WORDPIECE_FILE}) is not UTF-8 text") from None
    if lines and lines[-1] == "":
        lines.pop()  # the newline that ends the last line
    return _size_of_entries({line.rstrip("\r"): index for index, line in enumerate(lines)}, tokenizer_config)


def size_of_sentencepiece(model: bytes, tokenizer_config: bytes | None = None) -> int:
    """At least the tokens of a sentencepiece tokenizer: its model's pieces with tokenizer_config.json's added
    tokens not among them (sentencepiece_size's lower bound); NotSized for a model not read here, ValueError for a
    tokenizer_config.json that is not what its name says."""
    if (why := size_problem(len(model))) is not None:
        raise NotSized(f"its sentencepiece model {why}")
    try:
        found = sentencepiece_size.pieces(model)
    except ValueError as error:
        raise NotSized(f"its sentencepiece model {error}") from None
    return _size_of_entries({piece: index for index, piece in enumerate(found)}, tokenizer_config)


def has_tokenizer(file_names: list[str]) -> bool:
    """Whether a repo holding `file_names` has a file a tokenizer loads from (TOKENIZER_FILES, *.model, *.tiktoken)."""
    return any(name in TOKENIZER_FILES or ("/" not in name and name.endswith((".model", ".tiktoken")))
               for name in file_names)


def size_of_vocab_files(directory: str) -> int:
    """The tokens of a slow BPE tokenizer's files (GPT-2's layout, no tokenizer.json) in `directory`: vocab.json with
    added_tokens.json and tokenizer_config.json beside it, counted as size_of_vocab counts the Hub's; each file read
    as a user file within MAX_TOKENIZER_BYTES; ValueError naming the file that is not so."""

    def read(name: str) -> bytes | None:
        path = os.path.join(directory, name)
        return user_files.read_bytes(path, MAX_TOKENIZER_BYTES) if os.path.isfile(path) or name == VOCAB_FILE else None

    try:
        return size_of_vocab(read(VOCAB_FILE), read(TOKENIZER_CONFIG_FILE), read(ADDED_TOKENS_FILE))
    except ValueError as error:
        raise ValueError(f"{directory} {error}") from None


# Files a tokenizer loads from besides those above: tiktoken's, and Mistral's tekken (transformers'
# integrations/mistral/constants.py is_tekken_vocab_filename).
OTHER_LOADERS = ("*.tiktoken", "tekken*.json")


def _other_loaders(directory: str) -> bool:
    import glob

    return any(glob.glob(os.path.join(glob.escape(directory), pattern)) for pattern in OTHER_LOADERS)


def size_in_directory(directory: str) -> int:
    """The tokens of the tokenizer in a directory on this machine: its tokenizer.json, its size checked before a
    byte is read, else its vocab.json with the added tokens (size_of_vocab_files), its vocab.txt, or its sentencepiece
    model. NotSized without any, or a sentencepiece model not read here; ValueError for a file that is not what its
    name says (a sentencepiece model that nothing loads, sentencepiece_size.unloadable, among them)."""
    directory = os.path.expanduser(directory)
    path = os.path.join(directory, TOKENIZER_FILE)
    try:
        size = os.path.getsize(path)
    except OSError:
        if os.path.isfile(os.path.join(directory, VOCAB_FILE)):
            return size_of_vocab_files(directory)
        sizers = [(WORDPIECE_FILE, size_of_wordpiece)]
        sizers += [(name, size_of_sentencepiece) for name in sentencepiece_size.SENTENCEPIECE_FILES]
        for name, sized in sizers:  # each with tokenizer_config.json's added tokens
            if os.path.isfile(vocabulary := os.path.join(directory, name)):
                config = os.path.join(directory, TOKENIZER_CONFIG_FILE)
                data = user_files.read_bytes(vocabulary, MAX_TOKENIZER_BYTES)
                # The directory's only tokenizer file, a sentencepiece model that nothing loads: AutoTokenizer
                # would fail on it after seconds of imports (sentencepiece, then tiktoken; its noise on stderr).
                if sized is size_of_sentencepiece and not _other_loaders(directory) and (
                        why := sentencepiece_size.unloadable(data)) is not None:
                    raise ValueError(f"{vocabulary} {why}")
                try:
                    return sized(data,
                                 user_files.read_bytes(config, MAX_TOKENIZER_BYTES) if os.path.isfile(config) else None)
                except ValueError as error:
                    raise ValueError(f"{vocabulary} {error}") from None
        raise NotSized(f"{directory} has no {TOKENIZER_FILE}, {VOCAB_FILE}, {WORDPIECE_FILE} or sentencepiece "
                       "model") from None
    if (why := size_problem(size)) is not None:
        raise ValueError(f"{path} {why}")
    data = user_files.read_bytes(path, MAX_TOKENIZER_BYTES)  # a regular file without holes (user_files.Refused)
    try:
        return size_of(data)
    except ValueError as error:
        raise ValueError(f"{path} {error}") from None


def vocabulary_problem(tokens: int, vocab_size: Any) -> str | None:
    """Why a tokenizer of `tokens` tokens cannot feed a model whose config.json says `vocab_size` (the words after
    'the tokenizer <name>'), or None."""
    if isinstance(vocab_size, int) and tokens > vocab_size:
        return (f"has {tokens:,} tokens, more than the model's vocabulary of {vocab_size:,} (its config.json's "
                f"vocab_size): ids from {vocab_size:,} up index past the embedding and fail on the GPUs")
    return None


def size_on_hub(repo_id: str, token: str | bool | None, files: list[str] | None = None) -> int:
    """The tokens of a Hub repo's tokenizer: its tokenizer.json, else its vocab.json or vocab.txt, else its
    sentencepiece model (with tokenizer_config.json's added tokens), each in one request with no retries, at most one
    byte past MAX_TOKENIZER_BYTES (workload.model.model_source.read_file), each file once; `files`, the repo's file
    list when had, spares the requests for files it lacks. First the JSON files AutoTokenizer json.loads
    (check_json_files). NotSized when the repo has neither; huggingface_hub's errors for the Hub's other answers,
    model_source.Unreachable for none; ValueError for a file that is not what its name says."""
    from huggingface_hub.errors import EntryNotFoundError

    from workload.model import model_source

    seen: dict[str, bytes | None] = {}

    def read(name: str) -> bytes | None:  # each file asked for once
        if files is not None and name not in files:
            return None
        if name not in seen:
            try:
                seen[name] = model_source.read_file(repo_id, name, token, MAX_TOKENIZER_BYTES)
            except EntryNotFoundError:
                seen[name] = None
        return seen[name]

    check_json_files(read, files is not None, lambda name, why: f"{repo_id}'s {name} on the Hub is {why}")
    return _size_from_hub(repo_id, files, read)


def check_json_files(read, listed: bool, words) -> None:
    """The rule of a tokenizer's JSON files that AutoTokenizer json.loads (JSON_NOT_LOADED): tokenizer_config.json, and
    special_tokens_map.json where the repo lists it and tokenizer_config.json has no added_tokens_decoder. `read(name)`:
    the file's bytes or None (read once: model_source.read_file); ValueError with `words(name, why)` otherwise."""
    config = read(TOKENIZER_CONFIG_FILE)
    if config is not None and (why := json_object_problem(config)) is not None:
        raise ValueError(f"{words(TOKENIZER_CONFIG_FILE, why)}; {JSON_NOT_LOADED}")
    if config is not None and (why := tokenizer_fields.problem(json.loads(config.decode("utf-8")))) is not None:
        raise ValueError(words(TOKENIZER_CONFIG_FILE, f"a file whose {why}"))  # a field from_pretrained reads typed
    legacy = config is None or "added_tokens_decoder" not in json.loads(config.decode("utf-8"))
    special = read(SPECIAL_TOKENS_FILE) if legacy and listed else None
    if special is not None and (why := json_object_problem(special)) is not None:
        raise ValueError(f"{words(SPECIAL_TOKENS_FILE, why)}; {JSON_NOT_LOADED}")


def _size_from_hub(repo_id: str, files: list[str] | None, read) -> int:
    data = read(TOKENIZER_FILE)
    if data is not None:
        try:
            return size_of(data)
        except ValueError as error:
            raise ValueError(f"{repo_id}'s {TOKENIZER_FILE} on the Hub {error}") from None
    vocab = read(VOCAB_FILE)
    wordpiece = read(WORDPIECE_FILE) if vocab is None else None
    # Without the file list, only the usual name is asked for (one request, not one per name).
    names = ([name for name in sentencepiece_size.SENTENCEPIECE_FILES if name in files] if files is not None
             else sentencepiece_size.SENTENCEPIECE_FILES[:1])
    model = read(names[0]) if vocab is None and wordpiece is None and names else None
    if vocab is None and wordpiece is None and model is None:
        raise NotSized(f"{repo_id} has no {TOKENIZER_FILE}, {VOCAB_FILE}, {WORDPIECE_FILE} or sentencepiece model on "
                       "the Hub")
    try:
        if model is not None:
            return size_of_sentencepiece(model, read(TOKENIZER_CONFIG_FILE))
        if wordpiece is not None:
            return size_of_wordpiece(wordpiece, read(TOKENIZER_CONFIG_FILE))
        return size_of_vocab(vocab, read(TOKENIZER_CONFIG_FILE),
                             read(ADDED_TOKENS_FILE) if files and ADDED_TOKENS_FILE in files else None)
    except ValueError as error:
        raise ValueError(f"{repo_id}'s tokenizer on the Hub {error}") from None


def file_load_problem(directory: str) -> str | None:
    """load_problem of a local directory's tokenizer.json (after "{flag} {name}: "), or None: no such file, or one
    the other checks refuse in their own words (too large, not a regular file)."""
    path = os.path.join(os.path.expanduser(directory), TOKENIZER_FILE)
    try:
        data = user_files.read_bytes(path, MAX_TOKENIZER_BYTES)
        size_of(data)  # this module's own words first (a merge outside the vocabulary, an id that is no number)
    except (OSError, user_files.Refused):
        return None
    except ValueError as error:
        return f"its {TOKENIZER_FILE} {error}"
    return None if (why := load_problem(data)) is None else f"its {TOKENIZER_FILE} {why}"
