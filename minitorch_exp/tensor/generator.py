"""Generator: PyTorch's ``torch.Generator``, a seeded random stream, on the host.

It *is* a ``numpy.random.Generator`` (PCG64), so everything here that takes
``generator=`` (``rand``, ``randn``, ``randint``, ``randperm``, ``multinomial``,
``nn.init``, ``RandomSampler``, ``random_split``) draws from it unchanged, and a
NumPy Generator is still accepted where one is. Every random number in the
project, a GPU tensor's too, is drawn on the host (minitorch_exp/cuda.py), so a
Generator's ``device`` is only remembered.

``manual_seed`` reseeds the stream in place (``mt.manual_seed`` the default one's),
so whoever holds a Generator -- a capture replaying random draws -- sees the new
seed. ``get_state``/``set_state`` save and restore the position in the stream as
six int64 numbers.
"""

from __future__ import annotations

import numpy as np

from .device import as_device

#: PyTorch's seed of a new Generator: ``torch.Generator().initial_seed()``.
DEFAULT_SEED = 67280421310721
_MASK = (1 << 64) - 1


class Generator(np.random.Generator):
    """A random stream seeded by ``manual_seed(seed)``; a new one starts at PyTorch's
    default seed."""

    #: Wraps ``get_state``'s int64 array as a tensor; the Node level installs its own
    #: (node/library_ops.py), so that ``mt.Generator().get_state()`` is an ``mt`` tensor.
    wrap_state = staticmethod(lambda arr: arr)

    def __init__(self, device="cpu"):
        super().__init__(np.random.PCG64(DEFAULT_SEED))
        self.device = as_device(device)
        self._initial_seed = DEFAULT_SEED

    def manual_seed(self, seed: int) -> Generator:
        """Restart the stream from ``seed`` (any integer; taken modulo 2**64, as PyTorch's)."""
        seed = int(seed) & _MASK
        self.bit_generator.state = np.random.PCG64(seed).state
        self._initial_seed = seed
        return self

    def seed(self) -> int:
        """Reseed from the operating system's entropy; returns the new seed."""
        seed = int(np.random.SeedSequence().generate_state(1, np.uint64)[0])
        self.manual_seed(seed)
        return seed

    def initial_seed(self) -> int:
        """The seed the stream last started from."""
        return self._initial_seed

    def get_state(self):
        """Where the stream is, as six int64 numbers (``set_state`` takes them back)."""
        return self.wrap_state(state_array(self.bit_generator.state))

    def set_state(self, state) -> Generator:
        """Go back to a position ``get_state`` returned (a tensor or an array)."""
        values = np.asarray(state.numpy() if hasattr(state, "numpy") else state)
        self.bit_generator.state = state_dict(values)
        return self

    def __repr__(self) -> str:
        return f"<mt.Generator device={self.device.type} initial_seed={self._initial_seed}>"


def state_array(state: dict) -> np.ndarray:
    """PCG64's state dict as int64 numbers: the 128-bit state and increment in 64-bit
    halves, then the buffered 32-bit draw and whether it is there."""
    s, inc = state["state"]["state"], state["state"]["inc"]
    words = [s & _MASK, s >> 64, inc & _MASK, inc >> 64, state["uinteger"], state["has_uint32"]]
    return np.array(words, dtype=np.uint64).view(np.int64)


def state_dict(values: np.ndarray) -> dict:
    """``state_array``'s inverse."""
    if values.shape != (6,):
        raise ValueError(f"set_state: expected the 6 numbers get_state returns, got shape "
                         f"{values.shape}")
    w = [int(v) for v in values.astype(np.int64).view(np.uint64)]
    return {"bit_generator": "PCG64",
            "state": {"state": w[0] | (w[1] << 64), "inc": w[2] | (w[3] << 64)},
            "uinteger": w[4], "has_uint32": w[5]}
