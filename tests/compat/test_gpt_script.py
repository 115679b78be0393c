"""A PyTorch-style character-level GPT (tests/compat/gpt_script.py) run on minitorch_exp
with only its import lines changed: it trains, its losses after a few AdamW steps are
PyTorch's from the same weights (where PyTorch is installed), and it samples text
with ``multinomial``."""

from __future__ import annotations

import functools
import importlib
from pathlib import Path

import numpy as np
import pytest

from .test_scripts import port, share_weights

SCRIPT = (Path(__file__).parent / "gpt_script.py").read_text()


def run(lib: str) -> dict:
    """The script's namespace after running it on ``lib`` (minitorch_exp: the ported text)."""
    text = SCRIPT if lib == "torch" else port(SCRIPT)
    namespace = {"__name__": "gpt_script",
                 "share_weights": share_weights(importlib.import_module(lib))}
    exec(compile(text, f"<gpt_script on {lib}>", "exec"), namespace)
    return namespace


@functools.cache
def ported() -> dict:
    return run("minitorch_exp")


def test_only_the_import_lines_change():
    changed = [(a, b) for a, b in zip(SCRIPT.splitlines(), port(SCRIPT).splitlines()) if a != b]
    assert [b for _, b in changed] == ["import minitorch_exp as torch",
                                       "import minitorch_exp.nn as nn",
                                       "import minitorch_exp.nn.functional as F"]


def test_the_script_trains():
    losses = ported()["losses"]
    assert len(losses) == 8 and all(np.isfinite(losses))
    assert losses[-1] < losses[0] - 0.1


def test_the_losses_are_torchs():
    pytest.importorskip("torch")
    np.testing.assert_allclose(ported()["losses"], run("torch")["losses"], rtol=2e-4)


def test_the_script_samples_text():
    ns = ported()
    torch = ns["torch"]
    if not hasattr(torch, "multinomial"):
        pytest.skip("minitorch_exp has no multinomial yet: the sampling line cannot run")
    torch.manual_seed(1)
    out = ns["generate"](ns["model"], torch.zeros((1, 1), dtype=torch.long), 20)
    tokens = out[0].tolist()
    assert len(tokens) == 21 and all(0 <= t < len(ns["chars"]) for t in tokens)
    assert ns["model"].training
    print("".join(ns["itos"][t] for t in tokens))
