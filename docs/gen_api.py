"""Write docs/api.md: every public name of the package, its signature and its docstring.

    python docs/gen_api.py           # rewrite docs/api.md
    python docs/gen_api.py --check   # exit 1 when docs/api.md is out of date

The public names of a module are its ``__all__``. Each is rendered once, under
the first module that exports it; later modules link back to it.
``tests/test_docs.py`` fails when the committed file differs from the output.
"""

from __future__ import annotations

import argparse
import importlib
import inspect
import re
import sys
import types
from pathlib import Path

MODULES = ["minitorch_exp", "minitorch_exp.tensor", "minitorch_exp.nn", "minitorch_exp.nn.optim",
           "minitorch_exp.optim", "minitorch_exp.optim.lr_scheduler", "minitorch_exp.nn.init"]
API_MD = Path(__file__).resolve().parent / "api.md"

HEADER = """# API reference

Generated from docstrings and signatures by `docs/gen_api.py`; do not edit by
hand. Regenerate with `python docs/gen_api.py` after changing a public name.

"""


def render() -> str:
    seen: dict[int, str] = {}
    parts = [HEADER, _contents()]
    for name in MODULES:
        parts.append(_render_module(name, seen))
    return re.sub(r"\n{3,}", "\n\n", "\n".join(parts)).rstrip() + "\n"


def _contents() -> str:
    return "".join(f"- [`{m}`](#{_anchor(m)})\n" for m in MODULES)


def _anchor(text: str) -> str:
    return re.sub(r"[^a-z0-9_ -]", "", text.lower()).replace(" ", "-")


def _render_module(name: str, seen: dict[int, str]) -> str:
    module = importlib.import_module(name)
    lines = [f"## {name}", "", _first_paragraph(inspect.getdoc(module)), ""]
    for public in sorted(_public_names(module), key=str.lower):
        obj = getattr(module, public)
        qual = f"{name}.{public}"
        if id(obj) in seen and not isinstance(obj, (int, float, str)):
            lines += [f"### `{qual}`", "", f"Same object as `{seen[id(obj)]}`.", ""]
            continue
        seen[id(obj)] = qual
        lines += _render_object(qual, public, obj)
    return "\n".join(lines)


def _public_names(module) -> list[str]:
    """``__all__``; else what a lazy module's ``dir()`` lists; else what the module defines."""
    names = getattr(module, "__all__", None)
    if names is not None:
        return list(names)
    public = [n for n in dir(module) if not n.startswith("_") and not _plain_module(module, n)]
    if hasattr(module, "__getattr__"):  # PEP 562: the namespace is filled on demand
        return public
    return [n for n in public if getattr(getattr(module, n), "__module__", "") == module.__name__]


def _plain_module(module, name: str) -> bool:
    obj = getattr(module, name)
    return isinstance(obj, types.ModuleType) and not callable(obj)


def _render_object(qual: str, public: str, obj) -> list[str]:
    if isinstance(obj, type):
        return _render_class(qual, public, obj)
    if isinstance(obj, types.ModuleType):
        call = f" (callable: `{public}{_signature(type(obj).__call__, drop_self=True)}`)" \
            if callable(obj) else ""
        return [f"### `{qual}`", "", f"Module{call}. {_first_paragraph(inspect.getdoc(obj))}", ""]
    if callable(obj):
        return [f"### `{qual}{_signature(obj)}`", "", _doc(obj), ""]
    return [f"### `{qual}`", "", f"`{_clean(repr(obj))}`", ""]


def _render_class(qual: str, public: str, cls: type) -> list[str]:
    lines = [f"### class `{qual}{_signature(cls)}`", "", _doc(cls), ""]
    members = []
    for name, member in sorted(vars(cls).items()):
        if name.startswith("_"):
            continue
        if isinstance(member, property):
            members.append(f"- `{name}` (property): {_first_line(member.fget)}")
        elif isinstance(member, (staticmethod, classmethod)) or callable(member):
            fn = member.__func__ if isinstance(member, (staticmethod, classmethod)) else member
            drop = not isinstance(member, staticmethod)
            members.append(f"- `{name}{_signature(fn, drop_self=drop)}`: {_first_line(fn)}")
    if members:
        lines += [f"Members of `{public}`:", "", *members, ""]
    return lines


def _signature(obj, drop_self: bool = False) -> str:
    try:
        sig = inspect.signature(obj)
    except (TypeError, ValueError):
        return "(...)"
    if drop_self:
        params = list(sig.parameters.values())[1:]
        sig = sig.replace(parameters=params)
    return _clean(str(sig))


def _clean(text: str) -> str:
    """Drop memory addresses and ForwardRef wrappers, so every run and Python agree."""
    text = re.sub(r"ForwardRef\('([^']*)'\)", r"'\1'", text)
    return re.sub(r" at 0x[0-9a-fA-F]+", "", text)


def _doc(obj) -> str:
    doc = inspect.getdoc(obj)
    return _markdown(doc.strip()) if doc else "*No docstring.*"


SECTION = re.compile(r"^(Args|Arguments|Returns|Raises|Yields|Example|Examples|Note):\s*$")


def _markdown(doc: str) -> str:
    """Google-style sections become bold titles with bullet items; other text stays."""
    out: list[str] = []
    in_section = False
    for line in doc.splitlines():
        if SECTION.match(line):
            out += ["", f"**{line.rstrip(':')}**", ""]
            in_section = True
        elif in_section and line.startswith("    ") and not line.startswith("        "):
            name, colon, rest = line.strip().partition(":")
            out.append(f"- `{name}`:{rest}" if colon and " " not in name else f"- {line.strip()}")
        elif in_section and line.startswith("        "):
            out[-1] += " " + line.strip()
        else:
            in_section = in_section and bool(line.strip())
            out.append(line)
    return "\n".join(out).strip()


def _first_line(obj) -> str:
    doc = inspect.getdoc(obj)
    return doc.strip().splitlines()[0] if doc else "*no docstring*"


def _first_paragraph(doc: str | None) -> str:
    return doc.strip().split("\n\n")[0].replace("\n", " ") if doc else ""


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only compare with docs/api.md")
    args = parser.parse_args(argv)
    text = render()
    if args.check:
        current = API_MD.read_text() if API_MD.exists() else ""
        if current != text:
            print(f"{API_MD} is out of date; run: python docs/gen_api.py", file=sys.stderr)
            return 1
        return 0
    API_MD.write_text(text)
    print(f"wrote {API_MD} ({text.count(chr(10))} lines)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
