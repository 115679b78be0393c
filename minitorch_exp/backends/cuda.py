"""PyTorch's ``torch.backends.cuda``: ``matmul.allow_tf32`` and the like, accepted with no
effect."""

from types import SimpleNamespace

matmul = SimpleNamespace(allow_tf32=False, allow_fp16_reduced_precision_reduction=True)


def is_built() -> bool:
    from ..tensor.device import cuda_available
    return cuda_available()
