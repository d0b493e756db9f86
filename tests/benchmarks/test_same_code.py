"""``benchmarks.same_code`` tells a change of documentation from a change of code."""

from __future__ import annotations

import ast

from benchmarks.same_code import definitions, without_docs

BEFORE = '''
"""A module."""
class Shape:
    """Old words."""
    size: int = 1
    def fit(self, X):
        return X  # a comment
'''


def same(a: str, b: str) -> bool:
    return ast.dump(without_docs(a)) == ast.dump(without_docs(b))


def test_docstrings_comments_and_attribute_docs_are_documentation():
    after = BEFORE.replace('"""Old words."""', '"""New words.\n\n    Parameters\n    ----------\n    X : x\n    """')
    after = after.replace("size: int = 1", 'size: int = 1\n    """The size."""').replace("# a comment", "# other")
    assert same(BEFORE, after)


def test_a_function_left_with_a_docstring_alone_keeps_a_body():
    assert same("def f():\n    '''Doc.'''\n", "def f():\n    pass\n")
    assert not same("def f():\n    '''Doc.'''\n", "def f():\n    return 1\n")


def test_a_code_change_is_named_by_its_definition():
    after = BEFORE.replace("return X", "return X + 1")
    assert not same(BEFORE, after)
    a, b = definitions(without_docs(BEFORE)), definitions(without_docs(after))
    assert sorted(name for name in a.keys() | b.keys() if a.get(name) != b.get(name)) == ["Shape", "Shape.fit"]
