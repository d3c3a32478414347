"""A Hub dataset card's declared features that its train split's first record contradicts, found before anything
bills: load_dataset builds the split with the card's features when the card declares them (datasets/load.py
DatasetInfosDict.from_dataset_card_data: the README's `dataset_info`, one mapping or a list of them by config_name,
the builder's info for the config asked, or the only one), and its json builder casts every table to them
(datasets/packaged_modules/json/json.py JsonConfig _cast_table: a declared column the table lacks is added as nulls,
then table.py table_cast): a column the card does not declare raises CastError "column names don't match", and a value
pyarrow cannot cast to the declared dtype (the string "abc" to int64, 1.5 to int64, 300 to int8, "yes" to bool)
raises ArrowInvalid; both surface as DatasetGenerationError in the data stage, on the cluster. A declared column the
record lacks loads (nulls), as "12" to int64 and 12 to string do: pyarrow's cast rules decide, as in table_cast.

What is judged: the first record of the split's first .jsonl/.jsonl.gz file (the bytes hub_dataset already read), its
scalar values (string, number, bool) against the card's integer, float and bool dtypes (datasets' Value), by pyarrow's
cast rules written out in `castable` (tests/unit/test_hub_dataset_columns.py holds them against pyarrow's own cast);
a nested value or another dtype (a list, a class_label, a timestamp) is left to datasets. Bounded by the first record;
standard library only.
"""
from __future__ import annotations

import math
import re
import zlib

from workload.data.hub_columns import FIRST_RECORD_BYTES, first_object  # a later file's first line, read alike

JUDGED = (".jsonl", ".jsonl.gz")


def declared(metadata: dict | None, config: str) -> dict[str, object] | None:
    """{column: dtype} of the card's `dataset_info` features for `config` ("" for load_dataset's default: the only
    entry, else the one named "default"), or None when the card declares none or a form not read here."""
    infos = (metadata or {}).get("dataset_info")
    if isinstance(infos, dict):
        infos = [infos]
    if not isinstance(infos, list) or not all(isinstance(info, dict) for info in infos):
        return None
    by_name = {str(info.get("config_name", "default")): info for info in infos}
    info = by_name.get(config) if config else (infos[0] if len(infos) == 1 else by_name.get("default"))
    features = info.get("features") if info else None
    if not isinstance(features, list) or not features or not all(
            isinstance(item, dict) and isinstance(item.get("name"), str) for item in features):
        return None
    return {item["name"]: item.get("dtype") for item in features}


def first_record(name: str, body: bytes) -> dict | None:
    """The first record of a .jsonl(.gz) file's first bytes `body`, or None (another format, not a JSON object, a
    first line past the read)."""
    if not name.endswith(JUDGED):
        return None
    if name.endswith(".gz"):
        try:
            body = zlib.decompressobj(16 + zlib.MAX_WBITS).decompress(body, FIRST_RECORD_BYTES)
        except zlib.error:
            return None
    return first_object(body)


def contradiction(features: dict[str, object], record: dict) -> tuple[str, str] | None:
    """(column, why) for the first column of `record` datasets' cast to `features` fails on, or None."""
    for column in record:
        if column not in features:
            return column, (f"is not among the card's features ({', '.join(list(features)[:10])}): datasets' "
                            "CastError \"column names don't match\"")
    for column, value in record.items():
        dtype = features[column]
        if isinstance(dtype, str) and not castable(value, dtype):
            return column, (f"holds a {type(value).__name__} the card declares {dtype}, which pyarrow cannot cast "
                            "(datasets' table_cast raises ArrowInvalid)")
    return None


# pyarrow's safe cast of a JSON scalar to a primitive type, as table_cast makes it (pyarrow's compute cast kernels:
# "Failed to parse string", "Integer value ... not in range", "Float value ... was truncated"), written out so the
# check needs no pyarrow (its import is most of a second): where unsure, castable says yes.
INTEGERS = {f"{sign}int{bits}": (-(1 << (bits - 1)) if sign == "" else 0, (1 << (bits - 1 if sign == "" else bits)) - 1)
            for bits in (8, 16, 32, 64) for sign in ("", "u")}
FLOATS = ("float16", "float32", "float64", "float", "double", "halffloat")
BOOLEAN_WORDS = ("true", "false", "1", "0")  # pyarrow's string-to-boolean parse, any case
INTEGER_TEXT = re.compile(r"\s*[+-]?(?:\d+|0[xX][0-9a-fA-F]+)\s*")


def castable(value, dtype: str) -> bool:
    """Whether pyarrow casts the JSON scalar `value` to datasets' Value(`dtype`); True where not judged (another
    dtype, a nested value, null)."""
    if value is None or not isinstance(value, (str, int, float)):
        return True
    if dtype in INTEGERS:
        low, high = INTEGERS[dtype]
        if isinstance(value, str):
            return INTEGER_TEXT.fullmatch(value) is not None
        if isinstance(value, float):
            return math.isfinite(value) and value.is_integer() and low <= value <= high
        return isinstance(value, bool) or low <= value <= high
    if dtype in FLOATS and isinstance(value, str):
        try:
            float(value)
        except ValueError:
            return INTEGER_TEXT.fullmatch(value) is not None
    if dtype == "bool" and isinstance(value, str):
        return value.strip().lower() in BOOLEAN_WORDS
    return True
