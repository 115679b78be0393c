"""minitorch_exp: autograd on an expression-template engine, small enough to read.

``import minitorch_exp as mt`` gives the PyTorch-shaped user API (Nodes);
``minitorch_exp.tensor`` is the expression-template layer beneath it.

The API is loaded on first attribute access (PEP 562), so that importing
``minitorch_exp.tensor`` alone never loads the Node or nn levels: imports
point down only, and a test checks it.
"""

import importlib

from . import tensor as _tensor_package

_SUBMODULES = {"accelerator", "api", "autograd", "backends", "cuda", "distributed", "linalg",
               "nn", "node", "onnx", "optim", "serialization", "utils"}

__version__ = "0.1.0"


class _CallableTensorPackage(type(_tensor_package)):
    """``mt.tensor`` is both the subpackage ``minitorch_exp.tensor`` and PyTorch's factory.

    Calling the module makes a Node (``mt.tensor([1., 2.], requires_grad=True)``);
    attribute access reaches the Tensor level (``mt.tensor.Tensor``).
    """

    def __call__(self, data, dtype=None, device=None, requires_grad=False):
        from .node import tensor as make_node
        return make_node(data, dtype=dtype, device=device, requires_grad=requires_grad)


_tensor_package.__class__ = _CallableTensorPackage


def _api():
    return importlib.import_module(".api", __name__)


def __getattr__(name: str):
    if name in _SUBMODULES:
        return importlib.import_module(f".{name}", __name__)
    if name.startswith("_") and name != "__all__":
        raise AttributeError(name)
    api = _api()
    if name == "__all__" or name in api.__all__ or name in api.NOT_STARRED:
        value = api.__all__ if name == "__all__" else getattr(api, name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'minitorch_exp' has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(_api().__all__) | _api().NOT_STARRED | _SUBMODULES)
