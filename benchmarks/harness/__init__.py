"""The paper's benchmark protocol, shared by ``python -m benchmarks.bench`` and the scripts built on it.

- :mod:`~benchmarks.harness.variants`: the paper's Table I and the named variants of its protocol;
- :mod:`~benchmarks.harness.tasks`: one split as a task, run and cached, locally or on Dask;
- :mod:`~benchmarks.harness.tables`: the tables and the plot made from the cached records;
- :mod:`~benchmarks.harness.peer`: the peer method, MAPIE's multivariate standardised residuals;
- :mod:`~benchmarks.harness.shift`: the shift protocols (new positions, phones, users).
"""
