"""PyTorch's ``torch.backends.cudnn``: ``benchmark``, ``deterministic``, ``enabled`` and
``allow_tf32`` are accepted and have no effect (no cuDNN here; results on the CPU are
deterministic already)."""

enabled = True
benchmark = False
deterministic = False
allow_tf32 = True


def is_available() -> bool:
    """False: cuDNN is not used."""
    return False


def version() -> None:
    return None
