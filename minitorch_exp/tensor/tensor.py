"""Tensor = Storage + Layout. Views make a new Layout over the same Storage."""

from __future__ import annotations

import copy
import operator

import numpy as np

from . import capture, dtypes
from . import layout as L
from .device import CPU, Device, as_device
from .expr import ENGINE, RVALUE, Exp, Map, as_exp
from .storage import Storage


class Tensor(Exp):
    """A strided view of a Storage; the leaf (``RVALUE``) of every expression.

    ``shape``, ``strides`` (in elements, may be negative or zero) and ``offset``
    locate element ``(i0, ..., ik)`` at ``offset + sum(i_d * strides[d])`` of
    ``storage.data``. Arithmetic on tensors builds lazy expressions; assignment
    into a tensor (``t[...] = e``, ``t += e``) evaluates them, fused.
    """

    __slots__ = ("storage", "layout", "_array", "_leaf_tokens")
    kind = RVALUE

    def __init__(self, storage: Storage, layout: L.Layout):
        self._init_layout(storage, layout, storage.dtype, storage.device)

    def _init_layout(self, storage, layout, dtype, device, array=None):
        self.storage = storage
        self.layout = layout
        self.shape = layout.shape
        self.dtype = dtype
        self.device = device
        self._array = array  # (storage.data, its ndarray view): see ``array``
        self._leaf_tokens = None  # tokens.leaf_tokens, made when a map or statement first reads it

    @classmethod
    def meta(cls, shape, dtype) -> Tensor:
        """A data-less contiguous tensor, used only to compute the shape of a view."""
        t = cls.__new__(cls)
        t._init_layout(None, L.contiguous(tuple(shape)), dtype, CPU)
        return t

    @staticmethod
    def owning(flat: np.ndarray, arr: np.ndarray, layout: L.Layout) -> Tensor:
        """A CPU Tensor over a new Storage of the flat array ``flat``, ``arr`` being its
        view with ``layout``: what every op computed at once (tensor/eager.py) makes.
        ``Storage.__init__`` and ``_init_layout`` written out in one place: their two
        calls cost a quarter of such an op (tests/tensor/test_views.py checks that
        both ways make the same objects)."""
        s = _new_storage(Storage)
        s.data = flat
        s.device = CPU
        s.version = 0
        s.readers = None
        s.shared = False
        t = _new_tensor(Tensor)
        t.storage = s
        t.layout = layout
        t.shape = layout.shape
        t.dtype = arr.dtype
        t.device = CPU
        t._array = (flat, arr)
        t._leaf_tokens = None
        return t

    def __deepcopy__(self, memo) -> Tensor:
        """A view of the same layout over a copy of the Storage (one copy per Storage,
        however many of its views are copied together: ``memo``). The ndarray view and
        tokens this tensor cached belong to the old buffer: not carried over."""
        t = Tensor.__new__(Tensor)
        t._init_layout(copy.deepcopy(self.storage, memo), self.layout, self.dtype, self.device)
        return t

    def _with_layout(self, layout: L.Layout) -> Tensor:
        t = Tensor.__new__(Tensor)
        t._init_layout(self.storage, layout, self.dtype, self.device)
        return t

    # ---- layout facts --------------------------------------------------------
    @property
    def strides(self) -> L.Strides:
        return self.layout.strides

    @property
    def offset(self) -> int:
        return self.layout.offset

    def is_contiguous(self) -> bool:
        return L.is_contiguous(self.shape, self.layout.strides)

    def data_ptr_range(self) -> tuple[int, int]:
        return L.extent(self.layout)

    # ---- the NumPy (or CuPy) view of this tensor ------------------------------
    def numpy(self, writable: bool = True) -> np.ndarray:
        """The elements as a NumPy array sharing memory (copied to host for cuda).

        ``writable=False`` hands out a read-only view, which lazy values need not
        guard against; a writable one marks the buffer shared (``Storage.shared``).
        """
        if capture.active() is not None:
            raise capture.host_read_error("numpy()")
        if self.device.type != "cpu":
            return self.device.xp.asnumpy(self.array)
        if not writable:
            view = self.array.view()
            view.flags.writeable = False
            return view
        if not self.storage.shared:
            self.storage.share()
        return self.array

    @property
    def array(self):
        """This tensor as an ndarray of its device's array module; no copy.

        Kept with the buffer it views, and made again if the Storage's buffer was
        replaced since (an optimizer moves parameters into one flat buffer: nn/optim.py).
        """
        cached = self._array
        if cached is not None and cached[0] is self.storage.data:
            return cached[1]
        data = self.storage.data
        arr = array_view(self.storage, self.layout)
        self._array = (data, arr)
        return arr

    def __array__(self, dtype=None, copy=None):
        arr = self.numpy()
        if dtype is not None and arr.dtype != dtype:
            return arr.astype(dtype)
        return arr.copy() if copy else arr

    def item(self):
        if self.numel() != 1:
            raise ValueError(f"item() needs a tensor with one element, got shape {self.shape}")
        return self.numpy().reshape(()).item()

    def tolist(self):
        return self.numpy().tolist()

    def to(self, device) -> Tensor:
        device = as_device(device)
        if device == self.device:
            return self
        data = device.xp.asarray(self.numpy()) if device.type != "cpu" else self.numpy()
        # np.asarray, not np.ascontiguousarray: that one makes a 0-d array 1-d
        return from_array(np.asarray(data, order="C") if device.type == "cpu" else data, device)

    def cpu(self) -> Tensor:
        return self.to("cpu")

    def eval(self) -> Tensor:
        return self

    def clone(self) -> Tensor:
        return ENGINE.evaluate_copy(self)

    def contiguous(self) -> Tensor:
        return self if self.is_contiguous() else self.clone()

    def __repr__(self) -> str:
        body = np.array2string(self.numpy(), separator=", ", prefix="tensor(")
        return (f"tensor({body}, shape={self.shape}, dtype={self.dtype.name}, "
                f"device='{self.device}')")

    def __len__(self) -> int:
        if not self.shape:
            raise TypeError("len() of a 0-d tensor")
        return self.shape[0]

    def __iter__(self):
        for i in range(len(self)):
            yield self[i]

    # ---- views (never copy) --------------------------------------------------
    def transpose(self, i: int = 0, j: int = 1) -> Tensor:
        t = self._with_layout(L.transpose_layout(self.layout, i, j))
        cached = self._array
        if cached is not None and cached[0] is self.storage.data:  # NumPy's view is cheaper
            t._array = (cached[0], cached[1].swapaxes(i, j))
        return t

    def permute(self, *dims) -> Tensor:
        return self._with_layout(L.permute_layout(self.layout, L.normalize_shape(dims)))

    @property
    def T(self) -> Tensor:
        return self._with_layout(L.permute_layout(self.layout, tuple(reversed(range(self.ndim)))))

    def broadcast_to(self, *shape) -> Tensor:
        shape = L.normalize_shape(shape)
        if shape == self.shape:
            return self
        return self._with_layout(L.broadcast_layout(self.layout, shape))

    def expand(self, *shape) -> Tensor:
        return self._with_layout(L.expand_layout(self.layout, L.normalize_shape(shape)))

    def squeeze(self, axis=None) -> Tensor:
        return self._with_layout(L.squeeze_layout(self.layout, axis))

    def unsqueeze(self, axis: int) -> Tensor:
        return self._with_layout(L.unsqueeze_layout(self.layout, axis))

    def _try_view_reshape(self, shape) -> Tensor | None:
        strides = L.reshape_strides(self.shape, self.layout.strides, shape)
        if strides is None:
            return None
        return self._with_layout(L.Layout(shape, strides, self.layout.offset))

    def view(self, *shape) -> Tensor:
        """Reshape without copying; an error if the strides do not allow it."""
        shape = L.infer_shape(L.normalize_shape(shape), self.numel())
        out = self._try_view_reshape(shape)
        if out is None:
            raise ValueError(
                f"view: a tensor of shape {self.shape} with strides {self.strides} cannot be "
                f"viewed as {shape} without copying; use .reshape() (copies when needed)")
        return out

    def reshape(self, *shape) -> Tensor:
        """A view when the strides allow it, else a contiguous copy."""
        shape = L.infer_shape(L.normalize_shape(shape), self.numel())
        if shape == self.shape:
            return self
        out = self._try_view_reshape(shape)
        return out if out is not None else self.clone().view(shape)

    # ---- indexing ------------------------------------------------------------
    def __getitem__(self, key):
        if _is_basic_index(key):
            return self._with_layout(L.index_layout(self.layout, key))
        return _advanced_index(self, key)

    def __setitem__(self, key, value):
        if key is Ellipsis and type(value) is Map:
            return ENGINE.assign(self, value)  # ``w[...] = expression``: nothing to convert
        dst = self if key is Ellipsis else self[key]
        if not isinstance(dst, Tensor) or dst.storage is not self.storage:
            raise IndexError("cannot assign through integer-array or boolean-mask indexing "
                             "(it selects a copy); use where() or basic slices")
        if isinstance(value, Tensor) and value.storage is dst.storage and \
                value.layout == dst.layout:
            return  # ``t[i] += e`` writes through the view, then re-assigns the same view
        value = as_exp(value) if not isinstance(value, (list, tuple)) else tensor(value)
        if value.kind == RVALUE and value.device != dst.device:
            value = value.to(dst.device)  # data from another device: copied over, as torch does
        ENGINE.assign(dst, value)

    # ---- savers: in-place operators write straight into this tensor ----------
    def __iadd__(self, other):
        ENGINE.assign(self, as_exp(other), "+=")
        return self

    def __isub__(self, other):
        ENGINE.assign(self, as_exp(other), "-=")
        return self

    def __imul__(self, other):
        ENGINE.assign(self, as_exp(other), "*=")
        return self

    def __itruediv__(self, other):
        ENGINE.assign(self, as_exp(other), "/=")
        return self


def _is_basic_index(key) -> bool:
    items = key if isinstance(key, tuple) else (key,)
    for k in items:
        if k is None or k is Ellipsis or isinstance(k, slice):
            continue
        if isinstance(k, (bool, np.bool_)):
            return False
        try:
            operator.index(k)
        except TypeError:
            return False
    return True


def _advanced_index(t: Tensor, key) -> Tensor:
    """Integer-array and boolean-mask indexing: a copy, exactly as NumPy does it."""
    items = key if isinstance(key, tuple) else (key,)
    # Lists stay lists: NumPy reads ``[]`` as an empty *integer* index, while
    # ``np.asarray([])`` would be a float array it refuses.
    converted = tuple(k.numpy() if isinstance(k, Exp) else k for k in items)
    index = converted if isinstance(key, tuple) else converted[0]
    try:
        result = t.device.xp.asarray(t.array[index])
    except IndexError as err:
        raise IndexError(f"index into a tensor of shape {t.shape}: {err}") from None
    out = _wrap_array(result.copy(), t.device)  # not a constant of a capture: recorded below
    if capture.active() is not None:  # a gather by the array module: replays must repeat it
        capture.active().add(_gather, (out.array, t.array, index), out.storage)
    return out


def _gather(out, source, index) -> None:
    out[...] = source[index]


# ---- making tensors ------------------------------------------------------------

def array_view(storage: Storage, layout: L.Layout):
    """An ndarray (NumPy or CuPy) showing ``layout`` over ``storage`` without copying."""
    data = storage.data
    item = data.itemsize
    strides = tuple([s * item for s in layout.strides])
    if storage.device.type == "cpu":
        if 0 in layout.shape:  # an empty view's offset may lie past its buffer
            return np.ndarray(layout.shape, data.dtype, buffer=data, strides=strides)
        if min(layout.strides, default=0) >= 0:  # the everyday view: offset is its lowest
            return np.ndarray(layout.shape, data.dtype, buffer=data,
                              offset=layout.offset * item, strides=strides)
        lo, _ = L.extent(layout)  # NumPy measures negative strides from the buffer's start
        return np.ndarray(layout.shape, data.dtype, buffer=data[lo:],
                          offset=(layout.offset - lo) * item, strides=strides)
    xp = storage.device.xp
    # an empty view's offset may lie past its buffer, where CuPy refuses a pointer
    ptr = data.data + layout.offset * item if layout.numel else data.data
    return xp.ndarray(layout.shape, data.dtype, memptr=ptr, strides=strides)


def from_array(arr, device: Device = CPU) -> Tensor:
    """Wrap an ndarray (NumPy, or CuPy on cuda) as a Tensor, sharing its memory.

    The Storage is a flat view of exactly the bytes the array can reach, so any
    strides (negative, zero, gapped) are kept as they are. Made while capturing,
    the tensor is a constant of the capture (see ``capture.Recording``).
    """
    t = _wrap_array(arr, device)
    if capture.active() is not None:
        capture.active().note_constant(t.storage)
    return t


_new_storage, _new_tensor = Storage.__new__, Tensor.__new__


class ReadOnlyStorage(Storage):
    """The Storage of a read-only array (``arr.flags.writeable`` False): decided once,
    when it is wrapped; every write is refused in ``before_write``, before a kernel
    runs (a compiled kernel would fail to type a write into it)."""

    __slots__ = ()

    def before_write(self) -> None:
        raise ValueError(
            "tensor is read-only: its memory came from a read-only NumPy array "
            "(arr.flags.writeable is False, e.g. np.broadcast_to or a memory map); write "
            "into a copy instead: from_numpy(arr.copy()) or t.clone()")


def _storage(flat, device: Device) -> Storage:
    writeable = getattr(flat.flags, "writeable", True)  # CuPy arrays are always writable
    return Storage(flat, device) if writeable else ReadOnlyStorage(flat, device)


def _wrap_array(arr, device: Device) -> Tensor:
    if arr.dtype not in dtypes.SUPPORTED:
        arr = arr.astype(dtypes.default_dtype_for(arr))
    item = arr.dtype.itemsize
    if arr.size == 0 or any(s % item for s in arr.strides):
        arr = device.xp.ascontiguousarray(arr)
    if arr.flags.c_contiguous:
        return Tensor(_storage(arr.reshape(-1), device), L.contiguous(arr.shape))
    lay = L.Layout(tuple(arr.shape), tuple(s // item for s in arr.strides), 0)
    lo, hi = L.extent(lay)
    lowest = arr[tuple(slice(n - 1, n) if s < 0 else slice(0, 1)
                       for n, s in zip(lay.shape, lay.strides))]
    flat = device.xp.lib.stride_tricks.as_strided(lowest, shape=(hi - lo + 1,), strides=(item,))
    return Tensor(_storage(flat, device), L.Layout(lay.shape, lay.strides, -lo))


def from_numpy(arr: np.ndarray) -> Tensor:
    """Share the array's memory when its layout allows (zero-copy), else copy."""
    if not isinstance(arr, np.ndarray):
        raise TypeError(f"from_numpy expects a numpy.ndarray, got {type(arr).__name__}")
    t = from_array(arr, CPU)
    t.storage.shared = np.may_share_memory(t.storage.data, arr)  # see Storage.shared
    return t


def tensor(data, dtype=None, device="cpu") -> Tensor:
    """A new tensor holding a copy of ``data`` (nested lists, scalars or arrays)."""
    device = as_device(device)
    if isinstance(data, Exp):
        data = data.numpy()
    dtype = dtypes.as_dtype(dtype) if dtype is not None else dtypes.default_dtype_for(data)
    arr = np.array(data, dtype=dtype, copy=True, order="C")
    if device.type != "cpu":
        arr = device.xp.asarray(arr)
    return from_array(arr, device)

