"""Whether a name the docs cite is code that exists, as a reader would look it up."""

from __future__ import annotations

import ast
import builtins
import dataclasses
import importlib
import inspect


def _instance_attributes(cls) -> set[str]:
    """What instances of ``cls`` (and its bases) hold: dataclass fields, annotations, ``self.x = ...``."""
    names = set()
    for klass in inspect.getmro(cls):
        if klass is object:
            continue
        names.update(getattr(klass, "__annotations__", {}))
        if dataclasses.is_dataclass(klass):
            names.update(f.name for f in dataclasses.fields(klass))
        try:
            tree = ast.parse(inspect.getsource(klass).strip() if klass.__module__ != "builtins" else "")
        except (OSError, TypeError, SyntaxError):
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "self" \
                    and isinstance(node.ctx, ast.Store):
                names.add(node.attr)
    return names


def _walk(obj, parts: list[str]) -> bool:
    for i, attr in enumerate(parts):
        if hasattr(obj, attr):
            obj = getattr(obj, attr)
        elif inspect.isclass(obj) and i == len(parts) - 1 and attr in _instance_attributes(obj):
            return True
        else:
            return False
    return True


def resolves(target: str, module=None, owner: str | None = None) -> bool:
    """Whether ``target`` names code: absolute (its longest importable prefix, then attributes), else relative
    to the docstring's module, then to its class, else a built-in."""
    parts = target.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            root = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        return _walk(root, parts[cut:])
    scopes = [] if module is None else [module]
    if owner and hasattr(module, owner):
        scopes.append(getattr(module, owner))
    return any(_walk(scope, parts) for scope in scopes) or (len(parts) == 1 and hasattr(builtins, target))
