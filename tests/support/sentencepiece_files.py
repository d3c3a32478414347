"""Sentencepiece models for the tokenizer-size tests, written by protobuf itself."""
from __future__ import annotations


def sentencepiece_model(pieces: list[str]) -> bytes:
    """A sentencepiece ModelProto serialized by protobuf itself, through the compiled sentencepiece_model.proto that
    transformers ships (transformers/utils/sentencepiece_model_pb2_new.py): an encoder independent of the reader."""
    from transformers.utils import sentencepiece_model_pb2_new as proto

    model = proto.ModelProto()
    for index, text in enumerate(pieces):
        piece = model.pieces.add()
        piece.piece, piece.score, piece.type = text, -float(index), 2 if text == "<unk>" else 1
    model.trainer_spec.model_type, model.trainer_spec.unk_id, model.trainer_spec.vocab_size = 1, 0, len(pieces)
    model.normalizer_spec.name, model.normalizer_spec.add_dummy_prefix = "nmt_nfkc", True
    return model.SerializeToString()

