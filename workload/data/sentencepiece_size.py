"""The pieces of a sentencepiece model (tokenizer.model, spiece.model, sentencepiece.bpe.model), read from its
protobuf wire format with the standard library: the Pulumi program sizes a Hub tokenizer with it, and neither
sentencepiece nor a compiled sentencepiece_model_pb2 is among its packages.

sentencepiece_model.proto (github.com/google/sentencepiece, src/sentencepiece_model.proto): ModelProto holds
`repeated SentencePiece pieces = 1`, and a SentencePiece `optional string piece = 1`; a piece's id is its position.
The wire format is walked by workload/protobuf_wire.py, the one reader of it (event records use it too).

len(tokenizer) of a sentencepiece tokenizer is at least its pieces with tokenizer_config.json's added tokens not among
them: exactly that for Llama's and Mistral's (LlamaTokenizer: sp_model.get_piece_size() and the added tokens), more for
T5's (its 100 <extra_id_N> past the pieces) and XLM-R's (fairseq's offset of one, and <mask>). The count here is that
lower bound, so a tokenizer refused on it is certainly too large for the model.
"""
from __future__ import annotations

from workload import protobuf_wire

# The file names transformers' sentencepiece tokenizers load their model from (vocab_files_names["vocab_file"]):
# Llama's, Mistral's and Gemma's; T5's; XLM-R's.
SENTENCEPIECE_FILES = ("tokenizer.model", "spiece.model", "sentencepiece.bpe.model")
PIECES, PIECE = 1, 1  # ModelProto.pieces, SentencePiece.piece
LENGTH = 2  # the wire type of a length-delimited field: a message, or a string


class NotUtf8(ValueError):
    """A piece's bytes are not UTF-8: unread here, though sentencepiece's C++ parse (proto2, no UTF-8 check) may take
    them, so not a file that certainly loads nowhere."""


def pieces(data: bytes) -> list[str]:
    """The piece strings of a sentencepiece model's bytes, by id; ValueError for bytes that are not one."""
    found = []
    for field, kind, value in protobuf_wire.fields(data):
        if field == PIECES and kind == LENGTH:
            texts = [inner for number, inner_kind, inner in protobuf_wire.fields(value)
                     if number == PIECE and inner_kind == LENGTH]
            try:
                found.append(texts[-1].decode("utf-8") if texts else "")
            except UnicodeDecodeError:
                raise NotUtf8("holds a piece that is not UTF-8") from None
    if not found:
        raise ValueError("holds no pieces")
    return found


def tiktoken_shaped(data: bytes) -> bool:
    """Whether `data` could be a tiktoken BPE file, which transformers 5 reads from a *.model that sentencepiece
    cannot (tokenization_utils_tokenizers.py: "Falling back to TikToken extractor", through tiktoken/load.py's
    load_tiktoken_bpe): lines of `<base64 token> <rank>`, each non-empty line split into exactly two fields, the
    second an integer. Loose on purpose: a file counted as one is left to the libraries."""
    lines = [line for line in data.splitlines() if line]
    for line in lines:
        fields = line.split()
        if len(fields) != 2 or not fields[1].isdigit():
            return False
    return bool(lines)


def unloadable(data: bytes) -> str | None:
    """Why no tokenizer loads from a *.model file holding `data` (neither a sentencepiece model nor a tiktoken file:
    sentencepiece's ModelProto parse and tiktoken's both fail on it), or None."""
    try:
        pieces(data)
        return None
    except ValueError as error:
        if isinstance(error, NotUtf8) or tiktoken_shaped(data):
            return None
        return f"is neither a sentencepiece model (it {error}) nor a tiktoken file, so no tokenizer loads from it"
