"""A module and its PyTorch twin from the same weights: values and every gradient compared.

``twin(mine, theirs)`` loads the PyTorch module's state dict into ours -- the keys
must match one to one -- and ``compare_modules`` runs both on the same float64
inputs and upstream gradient, then compares the outputs, the inputs' gradients
and each parameter's gradient by name.
"""

from __future__ import annotations

import numpy as np

import minitorch_exp as mt


def twin(mine, theirs):
    """``mine`` with ``theirs``'s weights (a PyTorch module); the key lists are equal."""
    state = theirs.state_dict()
    assert list(mine.state_dict()) == list(state)
    mine.load_state_dict({k: v.detach().numpy() for k, v in state.items()})
    return mine


def as_torch(x):
    """A Node as a PyTorch tensor (a leaf requiring grad where the Node does); other
    values as they are."""
    import torch
    if not isinstance(x, mt.Node):
        return x
    t = torch.tensor(np.array(x.numpy()))
    return t.requires_grad_(True) if x.requires_grad else t


def compare_modules(mine, theirs, inputs: list, kwargs: dict | None = None, rtol=1e-7,
                    atol=1e-9, seed: int = 0, output=lambda out: out) -> None:
    """``output(mine(*inputs, **kwargs))`` against the same of ``theirs`` on the inputs
    converted; then both backward with one upstream gradient: the gradients of every
    input and parameter agree."""
    kwargs = kwargs or {}
    converted: dict = {}  # one twin per Node: self-attention passes one tensor three times

    def convert(x):
        return converted.setdefault(id(x), as_torch(x)) if isinstance(x, mt.Node) else x
    twins = [convert(x) for x in inputs]
    out = output(mine(*inputs, **kwargs))
    ref = output(theirs(*twins, **{k: convert(v) for k, v in kwargs.items()}))
    assert out.shape == tuple(ref.shape)
    np.testing.assert_allclose(out.numpy(), ref.detach().numpy(), rtol=rtol, atol=atol)
    import torch
    upstream = np.random.default_rng(seed).uniform(0.5, 1.5, ref.shape)
    out.backward(mt.tensor(upstream, dtype=out.dtype))
    ref.backward(torch.tensor(upstream, dtype=ref.dtype))
    pairs = [(f"input {i}", x, convert(x)) for i, x in enumerate(inputs)
             if isinstance(x, mt.Node) and x.requires_grad]
    params = dict(theirs.named_parameters())
    pairs += [(name, p, params[name]) for name, p in mine.named_parameters()]
    for name, x, t in pairs:
        if t.grad is None:  # not on the output's path (the weights do not read v)
            assert x.grad is None or not np.any(x.grad.numpy()), name
            continue
        assert x.grad is not None, f"{name} got no gradient"
        np.testing.assert_allclose(x.grad.numpy(), t.grad.numpy(), rtol=rtol, atol=atol,
                                   err_msg=f"gradient of {name}")
