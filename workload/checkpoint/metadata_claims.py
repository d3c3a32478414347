"""Where a checkpoint's `.metadata` says each stored item lies (shard file, offset, length), read without torch: so
`workload.export` refuses a shard cut short, or a claim past its file, in milliseconds, before the seconds of torch's
imports, with the words reader.check_storage uses after them (both call `check_items`).

The pickle is read by a restricted Unpickler like reader.py's, admitting only the globals metadata_globals.py admits,
but each of DCP's classes is a stand-in (a plain object taking the pickled state: dataclasses pickle as NEWOBJ of the
class and BUILD of their __dict__, Lib/copyreg.py __reduce_ex__; torch.Size and the enum as REDUCE of their arguments).
Only `storage_data`'s values are read from it: `_StorageInfo(relative_path, offset, length)`
(torch/distributed/checkpoint/filesystem.py). Anything else (a pickle these stand-ins cannot build, a value of
another shape) is left to reader.py, which remains the rule: a genuine checkpoint is never refused here.

Standard library only (workload.checkpoint.file_checks calls it before torch is imported).
"""
from __future__ import annotations

import io
import pickle
from typing import Any

from workload.checkpoint import metadata_globals


class _StandIn:
    """One of DCP's metadata classes (or torch.Size, a dtype), holding what the pickle gave it."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.args = args

    def __setstate__(self, state: Any) -> None:
        if isinstance(state, tuple) and len(state) == 2:  # (__dict__, __slots__ values)
            state = {**(state[0] or {}), **(state[1] or {})}
        if isinstance(state, dict):
            self.__dict__.update(state)


class _ClaimsUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        if not metadata_globals.admitted(module, name):
            raise pickle.UnpicklingError(f"{module}.{name}")  # reader.py's Unpickler names it, in its words
        if module.startswith("pathlib"):
            return super().find_class(module, name)
        return type(name, (_StandIn,), {})

    def persistent_load(self, pid: Any) -> Any:
        raise pickle.UnpicklingError("a persistent reference")


def stored_items(data: bytes) -> list[tuple[Any, Any, Any]] | None:
    """(relative_path, offset, length) of each item `.metadata`'s bytes place in a shard file, or None where these
    stand-ins cannot tell (reader.py's Unpickler then reads it, with torch's classes)."""
    try:
        metadata = _ClaimsUnpickler(io.BytesIO(data)).load()
        storage = getattr(metadata, "storage_data", None)
        if not isinstance(storage, dict):
            return None
        return [(getattr(info, "relative_path", None), getattr(info, "offset", None), getattr(info, "length", None))
                for info in storage.values()]
    except Exception:  # noqa: BLE001  (anything the stand-ins cannot build is reader.py's to read)
        return None


def tensor_shapes(data: bytes) -> dict[str, tuple[int, ...]] | None:
    """The shape of each tensor `.metadata`'s bytes list, by its name in the saved state (TensorStorageMetadata.size, a
    torch.Size pickled as REDUCE of its tuple), or None where these stand-ins cannot tell (reader.py then reads it)."""
    try:
        listed = getattr(_ClaimsUnpickler(io.BytesIO(data)).load(), "state_dict_metadata", None)
        if not isinstance(listed, dict):
            return None
        shapes = {}
        for name, item in listed.items():
            size = getattr(item, "size", None)
            if type(item).__name__ == "TensorStorageMetadata" and isinstance(name, str) and isinstance(size, _StandIn):
                dimensions = size.args[0] if size.args else None
                if isinstance(dimensions, tuple) and all(isinstance(number, int) for number in dimensions):
                    shapes[name] = dimensions
        return shapes
    except Exception:  # noqa: BLE001  (anything the stand-ins cannot build is reader.py's to read)
        return None
