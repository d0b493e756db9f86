"""The Dask client of ``--engine dask``: a scheduler the user names, or a local cluster of worker processes."""

from __future__ import annotations

from contextlib import contextmanager

from models.exceptions import InputError

#: worker processes of the local cluster when ``--workers`` is not given
LOCAL_WORKERS = 2


@contextmanager
def dask_client(scheduler: str | None, workers: int | None = None, **worker_options):
    """A ``distributed.Client`` on ``scheduler`` (``tcp://host:port``), or on a local cluster of ``workers``
    single-threaded processes started here (``worker_options``: the cluster's, e.g. ``env``); closed on exit.
    An unreachable scheduler is an :class:`InputError` naming ``--scheduler``."""
    from dask.distributed import Client, LocalCluster

    cluster = None
    if scheduler:
        try:
            client = Client(scheduler, timeout="20s")
        except (OSError, TimeoutError) as exc:
            raise InputError(f"--scheduler {scheduler}: no Dask scheduler answered ({exc})", field="--scheduler",
                             expected="the address of a running scheduler, e.g. tcp://10.0.0.5:8786",
                             received=scheduler) from exc
    else:
        cluster = LocalCluster(n_workers=max(workers or LOCAL_WORKERS, 1), threads_per_worker=1, processes=True,
                               dashboard_address=None, **worker_options)
        client = Client(cluster)
    try:
        yield client
    finally:
        client.close()
        if cluster is not None:
            cluster.close()
