"""The repository's scripts (``examples/``, ``docs/gen_api.py``) imported as modules, for
tests that call their functions rather than run them as programs."""

from __future__ import annotations

import importlib.util
import types
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def load_script(relative: str, name: str) -> types.ModuleType:
    """``ROOT / relative`` executed as the module ``name`` (not added to sys.modules)."""
    spec = importlib.util.spec_from_file_location(name, ROOT / relative)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
