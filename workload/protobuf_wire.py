"""Whether bytes are a protocol buffer message at all, read from the wire format alone (standard library): each
field a varint key (field number << 3 | wire type, the number 1 to 2**29 - 1), then a varint (type 0), 8 bytes (1), a
varint length and that many bytes (2), or 4 bytes (5); types 3 and 4 (groups, which no TensorBoard message has) and 6
and 7 do not exist. https://protobuf.dev/programming-guides/encoding/ ("Message Structure", "Base 128 Varints": at
most 10 bytes). Only the top level is walked: protobuf's own parser (DecodeError) still judges what a field holds;
this answers the payload that is no message at all before protobuf's modules are imported (tools.loss_curve), and
walks a sentencepiece model's pieces where neither sentencepiece nor protobuf is installed (the Pulumi program:
workload/data/sentencepiece_size.py)."""
from __future__ import annotations

MAX_FIELD_NUMBER = (1 << 29) - 1
FIXED_SIZES = {1: 8, 5: 4}


def _varint(data: bytes, at: int) -> tuple[int, int] | None:
    value = 0
    for shift, index in enumerate(range(at, min(at + 10, len(data)))):
        value |= (data[index] & 0x7F) << (7 * shift)
        if data[index] < 0x80:
            return value, index + 1
    return None  # cut off, or more than 10 bytes


def fields(data: bytes):
    """(field number, wire type, value) of each top-level field of a message's bytes; value is the bytes of a
    length-delimited field (type 2), else None. ValueError, in the words after 'its payload', for bytes that are no
    protocol buffer message."""
    at = 0
    while at < len(data):
        key = _varint(data, at)
        if key is None:
            raise ValueError(f"has a field key at byte {at} that is no varint")
        number, wire_type = divmod(key[0], 8)
        if not 1 <= number <= MAX_FIELD_NUMBER or wire_type not in (0, 1, 2, 5):
            raise ValueError(f"has a field key at byte {at} naming no field (number {number:,}, wire type {wire_type})")
        at, value = key[1], None
        if wire_type == 0:
            varint = _varint(data, at)
            if varint is None:
                raise ValueError(f"has a varint at byte {at} that is cut off or longer than 10 bytes")
            at = varint[1]
        elif wire_type == 2:
            length = _varint(data, at)
            if length is None or length[1] + length[0] > len(data):
                raise ValueError(f"has a length at byte {at} past its end")
            value = data[length[1]:length[1] + length[0]]
            at = length[1] + length[0]
        else:
            at += FIXED_SIZES[wire_type]
            if at > len(data):
                raise ValueError("ends inside a fixed-size field")
        yield number, wire_type, value


def problem(data: bytes) -> str | None:
    """Why `data` is no protocol buffer message (the words after 'its payload'), or None."""
    try:
        for _ in fields(data):
            pass
    except ValueError as error:
        return str(error)
    return None
