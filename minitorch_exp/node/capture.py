"""``capture(fn)``: a training step's kernels, replayed without its Python.

::

    @mt.capture
    def train_step(x, y):
        opt.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        return loss

    for x, y in loader:
        loss = train_step(x, y)      # kernels only, from the third call on

For each distinct signature (the shapes, dtypes and devices of the tensor
arguments, the values of the others, grad mode, the CPU evaluator):

1. the first call runs ``fn`` as usual -- a warm-up that creates whatever a
   first step creates (optimizer state, gradient buffers, compiled kernels);
2. the second runs it again while recording every kernel it launches
   (``tensor/capture.py``), into private copies of the tensor arguments;
3. every later call copies its arguments into those copies, replays the
   kernels, and gives each parameter the ``.grad`` the recorded run gave it.

So ``fn``'s Python runs twice per signature. What follows from that:

* whatever else it does (printing, appending to lists) happens only then;
* the ``training`` flag of each Module it reads (``Watched``) keys the recording
  too: after ``eval()`` the next calls warm up and record again for that mode, and
  ``train()`` brings back the replays of the train-mode recording. A flag ``fn``
  sets itself (``model.train()`` inside it) is no dependency; replays set it again;
* a change of structure or settings since then makes the next call start again
  from a warm-up: a Module, Parameter or tensor set, replaced or deleted as an
  attribute of any Module, or in a list or dict kept on one (``model.layers[-1]
  = nn.Linear(...)``), any other attribute of a Module given a different value
  (``dropout.p = 0.1``, ``bn.momentum = 0.01``), and an optimizer's
  ``param_groups`` replaced or added to. nn counts such changes
  (``nn.module.structure_version``) and registers the count here
  (``register_structure_source``). Any change counts, in any model (building a
  Module is one): build models before the loop. Not seen: another object bound
  to a name ``fn`` reads (a global, a closure; unless building it counted), a
  flag or setting kept outside Modules (a global, a config object, an attribute
  of the function), a group's ``params`` list changed in place, a list or dict
  nested in another, or one that held no Module or tensor when set and was not
  empty. After changing one of those, call ``reset()``;
* checks on data values are host ops, which every replay repeats where the eager
  call makes them: a class target outside ``[0, C)`` raises cross-entropy's
  ``ValueError`` before the backward and the optimizer's step run, so they write
  nothing (what the forward wrote before it, BatchNorm's running statistics, is
  written as eagerly); so are ``embedding``'s index check and the library ops
  (``gather``, ``topk``...). Indexing by a tensor, whose very shape needs values
  read on the host, raises ``CaptureError`` when recorded;
* reading values inside it raises ``CaptureError``; each call returns new
  detached copies of the tensors ``fn`` returned, to read outside;
* a parameter that receives a gradient and was given a new value object since
  the recording (an optimizer made afterwards moves parameters into its flat
  buffers) makes the next call record again. ``load_state_dict`` writes into
  the existing buffers, which replays read anyway; a frozen parameter given a
  new value object is not noticed: call ``reset()``;
* a parameter still holding a gradient that ``fn`` does not clear would make
  an eager call add to it where a replay overwrites it: that call runs eagerly;
* called while another captured function records in the same thread, it runs
  eagerly, so that the outer recording sees its kernels. Recording, like grad
  mode, belongs to a thread: another thread's kernels are not recorded. The
  recordings of one captured function are shared, so call it from one thread
  at a time;
* ``opt.step()`` inside is replayed as itself: each replay runs the
  optimizer's step eagerly (its Python and its kernels) at that point, so a
  learning rate changed by a schedule, any other hyperparameter changed in a
  group (momentum, weight decay, betas, eps) and Adam's step count are seen.
"""

from __future__ import annotations

import contextlib
import functools
import threading
from typing import NamedTuple

from ..tensor import capture as _recording
from ..tensor.backends import cpu_backend
from ..tensor.capture import CaptureError
from ..tensor.expr import Exp
from . import hooks
from .grad_mode import fusion, fusion_enabled, is_grad_enabled
from .node import Node


class _Log(threading.local):
    """While a captured function runs eagerly in this thread: ``grads``, ``(leaf, fresh)``
    for each gradient backward writes into a leaf (``note_grad``), and ``watched``, what
    it read and wrote of watched attributes (``Watched``); else None."""

    grads: list | None = None
    watched: _Accesses | None = None


_log = _Log()


def grad_log() -> list | None:
    """The calling thread's gradient log (None: no captured function runs eagerly)."""
    return _log.grads


# ---- watched attributes: Python values a recording depends on ---------------------------

class Watched:
    """An attribute whose value a captured step's recording depends on (nn's
    ``Module.training``): a data descriptor that notes reads and writes while a
    captured function runs eagerly.

    The values it read key the recording (``train()`` and ``eval()`` each get one,
    and switching back replays the one made for the mode). A value the function set
    itself before reading it is no dependency; replays set it again, as a call would.
    """

    def __set_name__(self, owner, name: str) -> None:
        self.name = name

    def __get__(self, obj, owner=None):
        if obj is None:
            return self
        try:
            value = obj.__dict__[self.name]
        except KeyError:
            raise AttributeError(self.name) from None
        if _log.watched is not None:
            _log.watched.read(obj, self.name, value)
        return value

    def __set__(self, obj, value) -> None:
        obj.__dict__[self.name] = value
        if _log.watched is not None:
            _log.watched.wrote(obj, self.name, value)


class _Accesses:
    """What one run read and wrote of watched attributes."""

    def __init__(self):
        self.first: dict = {}   # (id, name) -> (obj, name, value) read first; None: set first
        self.writes: dict = {}  # (id, name) -> (obj, name, value) set last

    def read(self, obj, name: str, value) -> None:
        self.first.setdefault((id(obj), name), (obj, name, value))

    def wrote(self, obj, name: str, value) -> None:
        self.first.setdefault((id(obj), name), None)
        self.writes[(id(obj), name)] = (obj, name, value)

    def reads(self) -> tuple:
        """``(obj, name, value)`` for each value read before the run set it."""
        return tuple(read for read in self.first.values() if read is not None)


def _holds(reads: tuple) -> bool:
    """Every watched attribute in ``reads`` still has the value read then."""
    return all(getattr(obj, name) == value for obj, name, value in reads)


def _matching(runs):
    """The first of ``runs`` (warm-ups or steps) whose reads still hold, else None."""
    return next((run for run in runs if _holds(run.reads)), None)


#: Functions that each return a value that changes whenever a model's structure does
#: (``register_structure_source``; nn registers its counter, so Node need not import nn).
_STRUCTURE_SOURCES: list = []


def register_structure_source(source) -> None:
    """Have captured functions record again whenever ``source()`` returns a new value
    (nn registers ``nn.module.structure_version``)."""
    _STRUCTURE_SOURCES.append(source)


register_structure_source(hooks.version)  # a hook added or removed: run eagerly again


def structure_version() -> tuple:
    """The values of the structure sources: when they change, recordings are dropped."""
    return tuple(source() for source in _STRUCTURE_SOURCES)


#: Warm-ups remembered per captured function (one per signature and watched values). A
#: non-tensor argument is part of the signature, so one that changes every call (pass it
#: as a tensor instead) makes every call a warm-up; past this many, the recordings are
#: dropped rather than piled up.
MAX_SIGNATURES = 64


def capture(fn):
    """Wrap ``fn`` so that repeated calls replay its kernels (see the module docstring)."""
    return CapturedFunction(fn)


class _WarmUp(NamedTuple):
    reads: tuple   # the watched values it read (``_Accesses.reads``)
    leaves: list   # the leaves it wrote gradients into


class CapturedFunction:
    def __init__(self, fn):
        self.fn = fn
        self._warm: dict = {}   # signature -> [_WarmUp]
        self._steps: dict = {}  # signature -> [_Step]
        self._version = None    # structure_version() after the last warm-up or recording
        functools.update_wrapper(self, fn)

    def __call__(self, *args):
        if _recording.active() is not None:  # inside another capture: be part of it
            return _detached(self.fn(*args))
        if structure_version() != self._version:  # a model changed: start again
            self.reset()
        key = _signature(args)
        steps = self._steps.setdefault(key, [])
        step = _matching(steps)
        if step is not None:
            if not step.stale():
                if step.can_replay():
                    return step.replay(args)
                with _as_replayed():  # a gradient to add to: eager, as promised
                    return _detached(self.fn(*args))
            steps.remove(step)
        warm = _matching(self._warm.get(key, ()))
        if warm is None:
            return self._warm_up(key, args)
        steps.append(step := _Step.record(self.fn, args, warm.leaves))
        self._version = structure_version()
        return step.results()

    def _warm_up(self, key, args):
        if sum(map(len, self._warm.values())) >= MAX_SIGNATURES:  # bounded, whatever happens
            self.reset()
        with _logging() as (log, watched), _as_replayed():
            out = self.fn(*args)
        self._warm.setdefault(key, []).append(_WarmUp(watched.reads(), _leaves(log)))
        self._version = structure_version()  # as the run left it (it may build parts)
        return _detached(out)

    @property
    def recordings(self) -> list:
        """The ``Recording`` (kernel calls) of each signature and mode recorded so far."""
        return [step.recording for steps in self._steps.values() for step in steps]

    def reset(self) -> None:
        """Forget every recording (the next calls warm up and record again)."""
        self._warm.clear()
        self._steps.clear()


def _as_replayed():
    """Eager calls of a captured function compute as its replays do: every op fused,
    none at once below the fusion threshold (a recording keeps kernels only), so a
    warm-up step gives the very bits a replayed one would -- and a run resumed
    mid-epoch, whose first step is a warm-up, the bits of one never stopped."""
    return fusion(fusion_enabled(), threshold=0)


def _leaves(log: list) -> list:
    """The leaves in a gradient log, once each, in order."""
    return list({id(leaf): leaf for leaf, _ in log}.values())


@contextlib.contextmanager
def _logging():
    """Log the gradients and watched attributes the run in the block touches."""
    _log.grads, _log.watched = log, watched = [], _Accesses()
    try:
        yield log, watched
    finally:
        _log.grads = _log.watched = None


class _Step:
    """One signature's recording: its kernels, inputs, outputs and the gradients set.

    ``structure`` is the nesting of ``fn``'s results (``_flatten``), not the model's;
    ``reads`` and ``writes``, the watched attributes it read and set (``Watched``).
    """

    def __init__(self, recording, inputs, outputs, structure, grads, self_cleared, watched):
        self.recording, self.inputs, self.outputs = recording, inputs, outputs
        self.structure, self.grads = structure, grads
        self.values = [(leaf, leaf._value) for leaf, _ in grads]
        self.self_cleared = self_cleared  # ids of leaves whose .grad fn clears itself
        self.reads, self.writes = watched.reads(), tuple(watched.writes.values())

    @classmethod
    def record(cls, fn, args, warm_leaves) -> _Step:
        inputs = [_private_copy(a) for a in args]
        held_grad = {id(leaf) for leaf in warm_leaves if leaf.grad is not None}
        call_args = [a if t is None else Node(t) if isinstance(a, Node) else t
                     for a, t in zip(args, inputs)]
        with _logging() as (log, watched), _recording.recording() as rec:
            outputs, structure = _flatten(fn(*call_args))
        if not all(fresh for _, fresh in log):
            raise CaptureError(
                "backward added to a .grad holding a gradient from before the call; a "
                "captured step must compute its gradients afresh: call opt.zero_grad() in "
                "it (or before it)")
        leaves = _leaves(log)
        return cls(rec, inputs, outputs, structure, [(leaf, leaf.grad) for leaf in leaves],
                   {id(leaf) for leaf in leaves if id(leaf) in held_grad}, watched)

    def stale(self) -> bool:
        """A parameter that received a gradient was given a new value since recording."""
        return any(leaf._value is not value for leaf, value in self.values)

    def can_replay(self) -> bool:
        """False when an eager call would add to a gradient a parameter still holds."""
        return all(leaf.grad is None or id(leaf) in self.self_cleared for leaf, _ in self.grads)

    def replay(self, args):
        for a, t in zip(args, self.inputs):
            if t is not None:
                t.array[...] = _tensor_of(a).array
        for obj, name, value in self.writes:
            object.__setattr__(obj, name, value)  # through Watched, noted by an outer log
        self.recording.replay()
        for leaf, grad in self.grads:
            leaf.grad = grad
        return self.results()

    def results(self):
        return _copies(self.structure, self.outputs)


def note_grad(leaf) -> None:
    """Backward is about to write a gradient into ``leaf`` (a captured function runs).

    Logged with whether the call computes it afresh: ``.grad`` is empty, or the
    recording has written it already (zeroed in place, or an earlier backward of
    the same step), so that replays start from the same state.
    """
    grad = leaf.grad
    rec = _recording.active()
    _log.grads.append((leaf, grad is None or (rec is not None and rec.wrote(grad.value.storage))))


# ---- arguments and results ----------------------------------------------------------

def _signature(args) -> tuple:
    key = [is_grad_enabled(), cpu_backend()]
    for a in args:
        if isinstance(a, (Node, Exp)):
            if isinstance(a, Node) and a.requires_grad:
                raise CaptureError("a captured function takes data, not parameters: an "
                                   "argument requires grad (use the model's parameters "
                                   "inside the function instead)")
            key.append((type(a), a.shape, a.dtype, a.device))
        else:
            try:
                hash(a)
            except TypeError:
                raise TypeError(f"a captured function's non-tensor arguments must be "
                                f"hashable (they key the recording), got "
                                f"{type(a).__name__}") from None
            key.append((type(a), a))  # 2 == 2.0 == True, but x * 2 and x * 2.0 differ
    return tuple(key)


def _tensor_of(a):
    """The Tensor a tensor argument holds (evaluated if lazy), else None."""
    if isinstance(a, Node):
        return a.value
    if isinstance(a, Exp):
        return a.eval()
    return None


def _private_copy(a):
    """A contiguous copy of a tensor argument (the buffer replays read), else None."""
    t = _tensor_of(a)
    return None if t is None else t.clone()


def _flatten(out):
    """The tensors in ``out`` (a Node, Tensor, None, or a tuple/list of them), realized."""
    if out is None:
        return [], None
    if isinstance(out, Node):
        return [out.value], "node"
    if isinstance(out, Exp):
        return [out.eval()], "tensor"
    if isinstance(out, (tuple, list)):
        tensors, parts = [], []
        for item in out:
            found, part = _flatten(item)
            tensors += found
            parts.append(part)
        return tensors, (type(out), parts)
    raise CaptureError(f"a captured function must return Nodes, tensors, None or tuples and "
                       f"lists of them, got {type(out).__name__}")


def _unflatten(structure, tensors: list):
    it = iter(tensors)

    def build(part):
        if part is None:
            return None
        if part == "node":
            return next(it)
        if part == "tensor":
            return next(it).value
        kind, parts = part
        return kind(build(p) for p in parts)

    return build(structure)


def _detached(out):
    tensors, structure = _flatten(out)
    return _copies(structure, tensors)


def _copies(structure, tensors: list):
    """New detached Nodes holding copies of ``tensors``, in ``structure``."""
    return _unflatten(structure, [Node(t.clone()) for t in tensors])
