"""PyTorch's ``torch.backends.mps`` (Apple's GPUs): not supported here."""


def is_available() -> bool:
    return False


def is_built() -> bool:
    return False
