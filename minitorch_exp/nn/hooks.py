"""Module hooks, as PyTorch's: forward pre-hooks, forward hooks and full backward hooks.

A Module with none is called as before (``forward`` only). Each ``register_*`` returns
a handle whose ``remove()`` takes the hook out (node/hooks.py ``RemovableHandle``).

The backward hook is made of tensor hooks (``Node.register_hook``): each tensor input
that requires grad, and each tensor output, passes through an identity Function whose
node is hooked. When the last input's gradient arrives (or, when no input requires
grad, the last output's), ``hook(module, grad_input, grad_output)`` runs; a tuple it
returns replaces ``grad_input`` -- for a module with one input that requires grad.
"""

from __future__ import annotations

import functools

from ..node.function import Function
from ..node.grad_mode import is_grad_enabled
from ..node.hooks import refuse_while_recording
from ..node.node import Node


class ModuleHooks:
    """One Module's hooks: lists of ``(handle id, entry)`` in the order they run."""

    def __init__(self):
        self.pre: list = []       # (hook, with_kwargs)
        self.forward: list = []   # (hook, with_kwargs)
        self.backward: list = []  # hook

    def __bool__(self) -> bool:
        return bool(self.pre or self.forward or self.backward)


def hooks_of(module) -> ModuleHooks:
    hooks = vars(module).get("_hooks")
    if hooks is None:
        hooks = ModuleHooks()
        object.__setattr__(module, "_hooks", hooks)  # not a part: the structure is the same
    return hooks


def call(module, hooks: ModuleHooks, args: tuple, kwargs: dict):
    """``module(*args, **kwargs)`` with its hooks."""
    refuse_while_recording(f"a hook of {type(module).__name__}")
    for _, (hook, with_kwargs) in list(hooks.pre):
        if with_kwargs:
            result = hook(module, args, kwargs)
            if result is not None:
                args, kwargs = result
        else:
            result = hook(module, args)
            if result is not None:
                args = result if isinstance(result, tuple) else (result,)
    backward = _BackwardCall(module, hooks.backward) if hooks.backward and is_grad_enabled() \
        else None
    if backward is not None:
        args = backward.inputs(args)
    out = module.forward(*args, **kwargs)
    for _, (hook, with_kwargs) in list(hooks.forward):
        result = hook(module, args, kwargs, out) if with_kwargs else hook(module, args, out)
        if result is not None:
            out = result
    return out if backward is None else backward.outputs(out)


class _Pass(Function):
    """The identity, as a node of its own that a backward hook can watch."""

    backward_on_nodes = True

    @staticmethod
    def forward(ctx, x):
        return x

    @staticmethod
    def backward(ctx, grad):
        return grad


def _needs_grad(x) -> bool:
    return isinstance(x, Node) and x.requires_grad


class _BackwardCall:
    """One call's full backward hooks: gathers ``grad_output`` and ``grad_input``."""

    def __init__(self, module, hooks: list):
        self.module, self.hooks = module, hooks
        self.grad_input: list = []
        self.grad_output: list = []
        self.inputs_left = self.outputs_left = 0
        self.watches_inputs = False

    def _watch(self, values: tuple, on_grad) -> tuple:
        watched = []
        for i, x in enumerate(values):
            if _needs_grad(x):
                x = _Pass.apply(x)
                x.register_hook(functools.partial(on_grad, i))
            watched.append(x)
        return tuple(watched)

    def inputs(self, args: tuple) -> tuple:
        self.grad_input = [None] * len(args)
        self.inputs_left = sum(map(_needs_grad, args))
        self.watches_inputs = self.inputs_left > 0
        return self._watch(args, self._input_grad)

    def outputs(self, out):
        outs = out if isinstance(out, tuple) else (out,)
        self.grad_output = [None] * len(outs)
        self.outputs_left = sum(map(_needs_grad, outs))
        watched = self._watch(outs, self._output_grad)
        return watched if isinstance(out, tuple) else watched[0]

    def _output_grad(self, i: int, grad: Node) -> None:
        self.grad_output[i] = grad
        self.outputs_left -= 1
        if self.outputs_left == 0 and not self.watches_inputs:  # no input will call
            self._run()

    def _input_grad(self, i: int, grad: Node):
        self.grad_input[i] = grad
        self.inputs_left -= 1
        if self.inputs_left:
            return None
        replaced = self._run()
        if replaced is None:
            return None
        if sum(g is not None for g in self.grad_input) > 1:
            raise NotImplementedError(
                "a full backward hook replacing grad_input is supported for a module with "
                "one input that requires grad; this one has several")
        return replaced[i]

    def _run(self):
        grad_input, grad_output = tuple(self.grad_input), tuple(self.grad_output)
        replaced = None
        for _, hook in list(self.hooks):
            result = hook(self.module, grad_input, grad_output)
            if result is not None:
                replaced = grad_input = tuple(result)
        return replaced
