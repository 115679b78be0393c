"""The environment variables minitorch_exp reads, each through one of these functions.

A value a variable cannot take is a ValueError naming the variable, the value and
what is accepted, raised where the variable is read (most at import). Unset or
blank, a variable has its default. Whole numbers are written in digits: ``1e9``
spells a float, and is refused (with the digits to write) rather than rounded,
the same for every numeric variable (tests/trust/test_environment_variables.py).
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from pathlib import Path

#: The spellings ``switch`` reads, and what each means.
SWITCH_VALUES = {"1": True, "true": True, "yes": True, "on": True,
                 "0": False, "false": False, "no": False, "off": False}


def text(name: str) -> str | None:
    """``$name`` without surrounding blanks; None when unset or blank."""
    value = os.environ.get(name, "").strip()
    return value or None


def _refused(name: str, value: str, accepted: str, hint: str = "") -> ValueError:
    return ValueError(f"environment variable {name}={value!r}: expected {accepted}{hint}; "
                      f"unset it for the default")


def whole_number(name: str, default: int | None, least: int = 0,
                 what: str = "") -> int | None:
    """``$name`` as an int ``>= least`` written in digits; ``what`` says what it counts."""
    value = text(name)
    if value is None:
        return default
    try:
        number = int(value)
    except ValueError:
        number = None
    if number is None or number < least:
        accepted = f"a whole number >= {least} in digits" + (f" ({what})" if what else "")
        raise _refused(name, value, accepted, _digits_hint(value))
    return number


def _digits_hint(value: str) -> str:
    """For a float's spelling of a whole number (``1e9``), the digits to write instead."""
    try:
        number = float(value)
    except ValueError:
        return ""
    return f"; write {value} as {int(number)}" if number.is_integer() else ""


def switch(name: str, default: bool) -> bool:
    """``$name`` as on or off: one of ``SWITCH_VALUES``, in any case."""
    value = text(name)
    if value is None:
        return default
    if value.lower() not in SWITCH_VALUES:
        raise _refused(name, value, "1 or 0 (or true/false, yes/no, on/off)")
    return SWITCH_VALUES[value.lower()]


def choice(name: str, default: str, choices: Sequence[str]) -> str:
    """``$name`` as one of ``choices``."""
    value = text(name)
    if value is None:
        return default
    if value not in choices:
        raise _refused(name, value, " or ".join(repr(c) for c in choices))
    return value


def seconds(name: str) -> float | None:
    """``$name`` as a finite number of seconds > 0; None when unset."""
    value = text(name)
    if value is None:
        return None
    try:
        number = float(value)
    except ValueError:
        number = math.nan
    if not (math.isfinite(number) and number > 0):
        raise _refused(name, value, "a number of seconds > 0")
    return number


def path(name: str) -> Path | None:
    """``$name`` as a path (any text names one); None when unset."""
    value = text(name)
    return None if value is None else Path(value)
