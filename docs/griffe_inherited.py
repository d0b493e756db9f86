"""A griffe extension for the reference: a method that overrides another without a docstring of its own shows the
contract of the method it overrides, as ``inspect.getdoc`` and ``help()`` do."""

from __future__ import annotations

import griffe


def classes(module: griffe.Module):
    """Every class of ``module`` and its submodules (nested classes included), aliases left out."""
    for member in module.members.values():
        if member.is_alias:
            continue
        if member.is_module:
            yield from classes(member)
        elif member.is_class:
            yield member
            yield from (m for m in member.members.values() if not m.is_alias and m.is_class)


def inherited_docstring(cls: griffe.Class, name: str) -> griffe.Docstring | None:
    """The docstring of the nearest base class's ``name`` that has one (``None``: no base documents it)."""
    for base in cls.mro():
        member = base.members.get(name)
        if member is not None and not member.is_alias and member.docstring:
            return member.docstring
    return None


class InheritDocstrings(griffe.Extension):
    """Give each undocumented override its base's docstring, once the package is loaded."""

    def on_package(self, *, pkg: griffe.Module, **kwargs) -> None:  # noqa: ARG002 (griffe's event signature)
        for cls in classes(pkg):
            for name, member in cls.members.items():
                if member.is_alias or not member.is_function or member.docstring:
                    continue
                try:
                    found = inherited_docstring(cls, name)
                except (griffe.AliasResolutionError, griffe.CyclicAliasError, ValueError):
                    continue  # a base outside the loaded packages: nothing to inherit
                if found is not None:
                    member.docstring = griffe.Docstring(found.value, lineno=found.lineno, parent=member,
                                                        parser=found.parser, parser_options=found.parser_options)
