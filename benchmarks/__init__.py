"""lmve's benchmarks: commands that measure the product and write ``benchmarks/results/``.

Run each from the repository root as a module, ``python -m benchmarks.<name>`` (``benchmarks/README.md``
indexes them and their results). :mod:`benchmarks.common` holds what they share, and
:mod:`benchmarks.harness` the paper's protocol, its variants and the shift protocols. This package is not
part of the installed product: the wheel holds ``models``, ``service`` and ``training`` only.
"""
