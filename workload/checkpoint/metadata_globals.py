"""The globals a checkpoint's `.metadata` pickle names, read from its opcodes without unpickling it and without torch:
so `workload.export` refuses a crafted one in milliseconds, before the seconds of torch's imports, with the words
the restricted Unpickler (workload/checkpoint/reader.py) uses for it after them.

A pickle names a global (a class or a function that unpickling imports, and a REDUCE then calls) in two ways
(Lib/pickletools.py, the opcode table; Lib/pickle.py, Unpickler.load_global and load_stack_global): GLOBAL and INST
carry "module name" in the opcode itself (protocols 0 to 2); STACK_GLOBAL (protocol 4 on) pops the name and the
module, two strings pushed before it, by a string opcode or fetched from the memo (MEMOIZE, PUT/BINPUT/LONG_BINPUT
store the top of the stack; GET/BINGET/LONG_BINGET push a stored one). The scan follows exactly that: it refuses a
global it can name that reader.py's Unpickler would refuse, and leaves anything it cannot name (a module string
built another way) to that Unpickler, which remains the rule: a genuine checkpoint is never refused here.

Standard library only (workload.checkpoint.file_checks calls it before torch is imported).
"""
from __future__ import annotations

import pickletools

# (module, name) pairs a DCP .metadata pickle names, besides torch's dtypes (`torch float32`, ...). Read off the
# pickles torch 2.13 writes (pickletools on a model + AdamW checkpoint) and the classes of
# torch/distributed/checkpoint/metadata.py in 2.11 and 2.13. Python 3.13 moved the path classes to pathlib._local,
# and pickle names a class by its __module__.
DCP_METADATA_MODULE = "torch.distributed.checkpoint.metadata"
_METADATA_CLASSES = ("Metadata", "MetadataIndex", "StorageMeta", "TensorProperties", "TensorStorageMetadata",
                     "BytesStorageMetadata", "ChunkStorageMetadata", "_MEM_FORMAT_ENCODING")
ALLOWED_GLOBALS = frozenset({
    *((DCP_METADATA_MODULE, name) for name in _METADATA_CLASSES),
    ("torch.distributed.checkpoint.filesystem", "_StorageInfo"),
    ("torch", "Size"),
    ("torch.serialization", "_get_layout"),
    *((module, name) for module in ("pathlib", "pathlib._local") for name in ("PosixPath", "PurePosixPath")),
})
# torch's dtypes by their attribute names (torch.dtype pickles as `torch <name>`): every name
# `isinstance(getattr(torch, name), torch.dtype)` holds for in torch 2.13 (tests/unit/test_metadata_globals.py
# checks this list against the installed torch). reader.py admits exactly torch's own; a name here that a later torch
# drops is left to it.
TORCH_DTYPES = frozenset({
    "bfloat16", "bit", "bits16", "bits1x8", "bits2x4", "bits4x2", "bits8", "bool", "cdouble", "cfloat", "chalf",
    "complex128", "complex32", "complex64", "double", "float", "float16", "float32", "float4_e2m1fn_x2", "float64",
    "float8_e4m3fn", "float8_e4m3fnuz", "float8_e5m2", "float8_e5m2fnuz", "float8_e8m0fnu", "half", "int", "int1",
    "int16", "int2", "int3", "int32", "int4", "int5", "int6", "int64", "int7", "int8", "long", "qint32", "qint8",
    "quint2x4", "quint4x2", "quint8", "short", "uint1", "uint16", "uint2", "uint3", "uint32", "uint4", "uint5",
    "uint6", "uint64", "uint7", "uint8",
})
_STRINGS = frozenset({"STRING", "BINSTRING", "SHORT_BINSTRING", "UNICODE", "BINUNICODE", "SHORT_BINUNICODE",
                      "BINUNICODE8"})
_PUTS = frozenset({"PUT", "BINPUT", "LONG_BINPUT"})
_GETS = frozenset({"GET", "BINGET", "LONG_BINGET"})
_NAMED = frozenset({"GLOBAL", "INST"})  # "module name" in the opcode's argument


def admitted(module: str, name: str) -> bool:
    """Whether reader.py's Unpickler may admit `module.name` (torch's dtypes by this list, see TORCH_DTYPES)."""
    return (module, name) in ALLOWED_GLOBALS or (module == "torch" and name in TORCH_DTYPES)


def named_globals(data: bytes) -> list[tuple[str, str]]:
    """The (module, name) of each global `data` (a pickle) names that the scan can tell, in order. A pickle that
    pickletools cannot read gives those before the point it could not: the Unpickler names what is wrong with it."""
    found: list[tuple[str, str]] = []
    recent: list[object] = []  # what the last opcodes pushed: a str, or None for anything else
    memo: dict[int, object] = {}
    try:
        for opcode, argument, _ in pickletools.genops(data):
            name = opcode.name
            if name in _STRINGS:
                recent.append(argument if isinstance(argument, str) else None)
            elif name in _GETS:
                recent.append(memo.get(argument))
            elif name == "MEMOIZE":
                memo[len(memo)] = recent[-1] if recent else None
            elif name in _PUTS:
                memo[argument] = recent[-1] if recent else None
            elif name in _NAMED and isinstance(argument, str) and " " in argument:
                found.append(tuple(argument.split(" ", 1)))
                recent.append(None)
            elif name == "STACK_GLOBAL":
                if len(recent) >= 2 and isinstance(recent[-2], str) and isinstance(recent[-1], str):
                    found.append((recent[-2], recent[-1]))
                recent.append(None)
            else:
                recent.append(None)  # the stack changed in a way not followed: nothing below is a known string
            del recent[:-2]
    except Exception:  # noqa: BLE001 - pickletools' ValueError on a garbled pickle, whatever else a crafted one does
        pass
    return found


def stream_problem(data: bytes) -> str | None:
    """Why `data` is no whole pickle (the words after the file's name), or None: empty, or an opcode stream that
    pickletools cannot read to its STOP (cut short, or a byte that is no opcode). pickle.load fails on exactly these
    (EOFError "Ran out of input", UnpicklingError), after torch's imports; said here before them, in plain words."""
    if not data:
        return "is empty (0 bytes); DCP's metadata is a pickle of the checkpoint's index (an incomplete copy?)"
    end = 0
    try:
        for _, _, position in pickletools.genops(data):
            end = position
    except Exception:  # noqa: BLE001 - pickletools' ValueError on a garbled or truncated pickle
        return (f"is no whole pickle: cut short or garbled after byte {end:,} of {len(data):,}; DCP's metadata is a "
                "pickle of the checkpoint's index (an incomplete copy?)")
    return None


def refused_global(data: bytes) -> str | None:
    """`module.name` of the first global `data` names that reader.py's Unpickler would refuse, or None."""
    return next((f"{module}.{name}" for module, name in named_globals(data) if not admitted(module, name)), None)


def refusal(path: str, named: str) -> str:
    """The one line that refuses `.metadata` at `path` for naming `named` (here and in reader.py's Unpickler)."""
    return (f"checkpoint file {path} names {named}, which a DCP checkpoint's metadata never holds; refused without "
            "loading it (a checkpoint is untrusted input: whoever wrote it could run code here)")
