"""The state a checkpoint saves, found once by DCP and then rebuilt from references at every later save.

DCP's `get_state_dict` walks every module and parameter of the model to name the state it returns (`_verify_options`,
`_get_fqns` per parameter, the model's whole `state_dict()` before the frozen base is dropped): about 1.3 s a save for
an 80-layer model whatever its size (measured on CPU for a 70B-shaped qlora model: 6,250 `_get_fqns` calls), which
was most of what a 70B qlora's save held the step for (1.27 s of an asynchronous save's blocking on an H100,
bench/results/checkpoint_bench-*). The names and the tensors behind them do not change between saves, so the first
save takes DCP's answer and learns, for every key, the parameter or the optimizer state it came from; later saves
rebuild the same dicts from those references in milliseconds.

Learning checks the rebuilt dicts against DCP's answer (the same keys, the same tensors' storage, the same other
values); where anything differs (a buffer in the state, a layout this does not know) the map keeps asking DCP at
every save. So a save's dicts are always exactly `sharded.state_to_save`'s.
"""
from __future__ import annotations

import torch
from torch import nn

from workload.checkpoint import sharded

# What DCP's get_state_dict strips from a parameter's name (torch/distributed/checkpoint/state_dict.py `_get_fqns`:
# torch.compile's wrapper, activation checkpointing's, FSDP1's).
WRAPPER_PARTS = ("_orig_mod", "_checkpoint_wrapped_module", "_fsdp_wrapped_module")


class StateMap:
    """One per run (model and optimizer); `state()` is `sharded.state_to_save(model, optimizer)`, faster after the
    first call."""

    def __init__(self, model: nn.Module, optimizer: torch.optim.Optimizer) -> None:
        self._model, self._optimizer = model, optimizer
        self._learned: tuple[list, list] | None = None
        self._learnable = True

    def serves(self, model: nn.Module, optimizer: torch.optim.Optimizer) -> bool:
        return model is self._model and optimizer is self._optimizer

    @property
    def learned(self) -> bool:
        return self._learned is not None

    def state(self) -> dict:
        if self._learned is not None:
            return self._rebuild(*self._learned)
        state = sharded.state_to_save(self._model, self._optimizer)
        if self._learnable:
            self._learn(state)
        return state

    def _learn(self, state: dict) -> None:
        # Tied weights (an lm_head sharing the embedding) are in the state under both names.
        by_name = {clean_name(name): parameter
                   for name, parameter in self._model.named_parameters(remove_duplicate=False)}
        model_keys = [(key, by_name.get(key)) for key in state[sharded.MODEL_KEY]]
        names: dict[int, str] = {}
        for name, parameter in by_name.items():
            names.setdefault(id(parameter), name)
        groups = [[names.get(id(parameter)) for parameter in group["params"]] for group in self._optimizer.param_groups]
        learned = (model_keys, groups)
        self._learnable = all(parameter is not None for _, parameter in model_keys) and all(
            name is not None for group in groups for name in group)
        if self._learnable and same(self._rebuild(*learned), state):
            self._learned = learned
        else:
            self._learnable = False

    def _rebuild(self, model_keys: list, groups: list) -> dict:
        model_state = {key: parameter.detach() for key, parameter in model_keys}
        optimizer = self._optimizer
        named = {id(parameter): name for group, names in zip(optimizer.param_groups, groups)
                 for parameter, name in zip(group["params"], names)}
        # In the optimizer's own order, as Optimizer.state_dict packs it and DCP renames it.
        state = {named[id(parameter)]: values for parameter, values in optimizer.state.items()}
        param_groups = [{**{key: value for key, value in group.items() if key != "params"}, "params": names}
                        for group, names in zip(optimizer.param_groups, groups)]
        return {sharded.MODEL_KEY: model_state, "optimizer": {"state": state, "param_groups": param_groups}}


def clean_name(name: str) -> str:
    return ".".join(part for part in name.split(".") if part not in WRAPPER_PARTS)


def same(mine, dcps) -> bool:
    """The same structure, keys in the same order, tensors over the same storage, other values equal."""
    if isinstance(dcps, torch.Tensor):
        return isinstance(mine, torch.Tensor) and type(mine) is type(dcps) and mine.shape == dcps.shape and (
            _local(mine).data_ptr() == _local(dcps).data_ptr()) and mine.dtype == dcps.dtype
    if isinstance(dcps, dict):
        return isinstance(mine, dict) and list(mine) == list(dcps) and all(same(mine[key], dcps[key]) for key in dcps)
    if isinstance(dcps, (list, tuple)):
        return isinstance(mine, (list, tuple)) and len(mine) == len(dcps) and all(map(same, mine, dcps))
    return type(mine) is type(dcps) and mine == dcps


def _local(tensor: torch.Tensor) -> torch.Tensor:
    return tensor.to_local() if hasattr(tensor, "to_local") else tensor
