"""``lmve-train --split-by COL --engine dask``: the models of a repository trained on a Dask cluster, one a task.

The client plans the models exactly as the local engine does (the same values, names and checks), then
checks every worker before any training: it must import lmve at the client's version and read the same
data (the digest of the rows it loads equals the client's). A worker reads the data itself, from the
path the command names (``--csv``, or ``LMVE_DATA_DIR`` for a built-in dataset): the data sits at the
same path on every worker (a shared filesystem, or a copy).

One task per model: the worker loads the data once for the run, trains the model's rows as the local
engine does into a temporary folder and returns the bundle's and the report's files. Where the user fixed
the thread counts (``LMVE_TORCH_THREADS``), the tasks train with this machine's counts, and the bundles
equal the local engine's bit for bit (no training choice follows a clock); otherwise each worker's fits
take the cores they find idle, and LMVE's results then differ with the thread count as they do between
two local runs on a busy and an idle machine. The client writes each bundle as it arrives (a temporary
sibling, then a rename) and the manifest last, so workers never write to ``--out``. A model that fails,
on an :class:`LMVEError` or any error on the cluster, is listed under ``failed`` with its error while the
others go on.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import os
import tempfile
import uuid
from pathlib import Path

import numpy as np

from models.bundle import write_atomic
from models.exceptions import InputError, LMVEError
from training.commands.sites import new_manifest, plan_sites, record, site_rows, split_values, write_manifest
from training.data.datasets import Dataset

#: the data a worker loaded, by run token (one run at a time: a new token drops the others)
_LOADED: dict[str, Dataset] = {}


def data_digest(dataset: Dataset, column: str) -> str:
    """A digest of what training reads: features, targets, groups and the split column's values."""
    h = hashlib.sha256()
    for part in (dataset.X, dataset.Y, dataset.groups):
        if part is not None:
            h.update(np.ascontiguousarray(part).tobytes())
    h.update("\x1f".join(map(str, np.asarray(dataset.meta[column]).tolist())).encode())
    return h.hexdigest()[:16]


def lmve_version() -> str | None:
    """The installed lmve distribution's version (``None`` where it is not installed as a distribution)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("lmve")
    except PackageNotFoundError:
        return None


def worker_dataset(args, token: str) -> Dataset:
    """The run's data on this worker: loaded with the command's flags on first use, then kept."""
    if token not in _LOADED:
        from training.commands.train_steps import load_data

        _LOADED.clear()
        with contextlib.redirect_stdout(io.StringIO()):  # the grouping note is the client's to print
            _LOADED[token] = load_data(args)
    return _LOADED[token]


def forget(token: str) -> None:
    """On a worker: drop the run's data (the run is over)."""
    _LOADED.pop(token, None)


def worker_check(args, token: str) -> dict:
    """On a worker: its lmve version and the digest of the data it loads (or the error loading it)."""
    try:
        dataset = worker_dataset(args, token)
    except LMVEError as exc:
        return {"version": lmve_version(), "error": str(exc)}
    except OSError as exc:
        return {"version": lmve_version(), "error": f"{type(exc).__name__}: {exc}"}
    return {"version": lmve_version(), "digest": data_digest(dataset, args.split_by), "rows": len(dataset.X)}


def _check_function(payload: bytes):
    """The check :meth:`distributed.Client.run` sends every worker, pickled by value so that a worker without lmve
    answers that it lacks the package instead of failing to unpickle."""
    def check() -> dict:
        import pickle

        try:
            from training.commands.sites_dask import worker_check
            args, token = pickle.loads(payload)
        except ImportError as exc:
            return {"package": f"{type(exc).__name__}: {exc}"}
        return worker_check(args, token)
    return check


def check_workers(client, args, token: str, digest: str, rows: int) -> int:
    """Every worker imports lmve at this version and loads the data this client loaded; an
    :class:`InputError` naming the first worker that does not, and what it lacks. The number of workers."""
    import pickle

    version = lmve_version()
    answers = client.run(_check_function(pickle.dumps((args, token))))
    if not answers:
        raise InputError("the Dask cluster has no workers", field="--scheduler", expected="at least one worker",
                         received="0 workers")
    where = (f"--csv {args.csv}" if args.csv is not None else f"the {args.dataset or 'synthetic'} dataset "
             "(LMVE_DATA_DIR)")
    for address, answer in sorted(answers.items()):
        if "package" in answer:
            raise InputError(f"Dask worker {address} lacks the lmve package ({answer['package']}); install lmve "
                             f"{version or ''} on every worker", field="--engine",
                             expected=f"workers with lmve {version}", received=answer["package"])
        if answer["version"] != version:
            raise InputError(f"Dask worker {address} runs lmve {answer['version']}, this machine {version}: the "
                             "bundles would differ; install one version everywhere", field="--engine",
                             expected=f"lmve {version}", received=str(answer["version"]))
        if "error" in answer:
            raise InputError(f"Dask worker {address} cannot load the data: {answer['error']}. Workers read "
                             f"{where} themselves, at the same path: put it on a filesystem every worker mounts",
                             field="--engine", expected=f"{where} readable on every worker", received=answer["error"])
        if answer["digest"] != digest:
            raise InputError(f"Dask worker {address} loads other data from {where} ({answer['rows']} rows, digest "
                             f"{answer['digest']}) than this machine ({rows} rows, digest {digest}): give every "
                             "worker the same file", field="--engine", expected=f"digest {digest}",
                             received=answer["digest"])
    return len(answers)


def thread_setting() -> dict:
    """This process's thread counts when the user fixed them (``LMVE_TORCH_THREADS`` set): the variable and
    the BLAS and OpenMP pools' sizes, for the workers to train with; ``{}`` otherwise (the fits of each
    process then take the cores they find idle, as :mod:`models.nn.threads` says)."""
    from models.nn.threads import ENV

    if not os.environ.get(ENV):
        return {}
    from threadpoolctl import threadpool_info

    return {"env": os.environ[ENV], "pools": {p["user_api"]: p["num_threads"] for p in threadpool_info()}}


@contextlib.contextmanager
def threads_of(setting: dict):
    """Inside the block, this process's threads as ``setting`` (:func:`thread_setting`) fixes them."""
    if not setting:
        yield
        return
    from threadpoolctl import threadpool_limits

    from models.nn.threads import ENV

    before = os.environ.get(ENV)
    os.environ[ENV] = setting["env"]
    try:
        with threadpool_limits(limits=setting["pools"]):
            yield
    finally:
        if before is None:
            os.environ.pop(ENV, None)
        else:
            os.environ[ENV] = before


def train_task(args, config, token: str, value: str, name: str, threads: dict | None = None) -> dict:
    """On a worker: train the model of ``value`` as the local engine does (with the client's fixed thread
    counts, ``threads``), in a temporary folder; its manifest entry and files (``bundle`` and ``report``:
    file name -> bytes), or ``failed``: the error."""
    from training.commands.train_steps import train_site

    dataset = worker_dataset(args, token)
    mask = dict(split_values(dataset, args.split_by))[value]
    rows = site_rows(dataset, args.split_by, value, mask)
    with tempfile.TemporaryDirectory(prefix="lmve-site-") as tmp, threads_of(threads or {}):
        try:
            entry = train_site(rows, name, config, args, Path(tmp))
        except LMVEError as exc:  # too few rows, too few groups...: this model only
            return {"failed": str(exc)}
        files = {what: {p.name: p.read_bytes() for p in sorted(folder.iterdir()) if p.is_file()}
                 for what, folder in (("bundle", Path(tmp) / name), ("report", Path(tmp) / "reports" / name))}
    return {"entry": entry, "files": files}


def train_repository_dask(dataset: Dataset, args, config, out: Path, *, names: dict[str, str] | None = None,
                          source: str = "") -> dict:
    """Train one model per value of ``args.split_by`` on the cluster of ``--scheduler`` (or a local one of
    ``--workers`` processes), one a task; write each bundle as it arrives and the manifest last; the
    manifest, its models in the planned order."""
    from dask.distributed import as_completed
    from tqdm.auto import tqdm

    from training.commands.cluster import dask_client

    column = args.split_by
    planned = plan_sites(dataset, column, names)
    manifest = new_manifest(column, source)
    token = uuid.uuid4().hex
    with dask_client(args.scheduler, args.workers) as client:
        workers = check_workers(client, args, token, data_digest(dataset, column), len(dataset.X))
        threads = thread_setting()
        futures = {client.submit(train_task, args, config, token, value, name, threads,
                                 key=f"lmve-train-{name}-{token}", pure=False): (value, int(mask.sum()), name)
                   for value, mask, name in planned}
        bar = tqdm(as_completed(futures), total=len(futures), desc=f"models by {column} on {workers} workers",
                   unit="model", disable=args.quiet)
        for future in bar:
            value, n_rows, name = futures[future]
            bar.set_postfix_str(f"{name} ({n_rows} rows)")
            try:
                answer = future.result()
            except Exception as exc:  # a worker died, a bug: this model only, named with its error
                answer = {"failed": f"{type(exc).__name__} on the cluster: {exc}"}
            if "failed" in answer:
                record(manifest, name, value, n_rows, reason=answer["failed"])
                continue
            write_atomic(out / name, answer["files"]["bundle"])
            write_atomic(out / "reports" / name, answer["files"]["report"])
            record(manifest, name, value, n_rows, entry=answer["entry"])
        bar.close()
        client.run(forget, token)  # a long-lived cluster keeps no copy of the data
    order = [name for _, _, name in planned]
    for key in ("models", "failed"):
        manifest[key] = {n: manifest[key][n] for n in order if n in manifest[key]}
    write_manifest(out, manifest)
    return manifest
