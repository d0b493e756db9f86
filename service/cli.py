"""``lmve-serve --bundle DIR | --model-repository DIR --host HOST --port PORT``: run the API with uvicorn.

Every flag is also an environment variable (``LMVE_BUNDLE``, ``LMVE_MODEL_REPOSITORY``,
``LMVE_DEFAULT_MODEL``, ``LMVE_HOST``, ``LMVE_PORT``, ``LMVE_GRPC_PORT``, ``LMVE_WORKERS``, ``LMVE_LOG_LEVEL``); flags win. See ``service.settings`` for the limits.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from service.settings import ServiceSettings


def build_parser(env: ServiceSettings | None = None) -> argparse.ArgumentParser:
    """The ``lmve-serve`` parser; its defaults are ``env``'s (the environment's settings when None)."""
    from service.settings import ServiceSettings

    env = env or ServiceSettings()
    p = argparse.ArgumentParser(prog="lmve-serve", description=__doc__.split("\n\n")[0],
                                epilog="Every other setting is an environment variable only (LMVE_*; the "
                                       "configuration reference lists them).")
    p.add_argument("--bundle", default=env.bundle, help="bundle directory (LMVE_BUNDLE)")
    p.add_argument("--model-repository", default=env.model_repository, metavar="DIR",
                   help="a directory of bundles, one model per subdirectory (LMVE_MODEL_REPOSITORY); "
                        "instead of --bundle")
    p.add_argument("--default-model", default=env.default_model, metavar="NAME",
                   help="the model the plain routes serve (LMVE_DEFAULT_MODEL; default: the only one)")
    p.add_argument("--host", default=env.host, help=f"bind address (LMVE_HOST, default {env.host})")
    p.add_argument("--port", type=int, default=env.port, help=f"port (LMVE_PORT, default {env.port})")
    p.add_argument("--grpc-port", type=int, default=env.grpc_port, metavar="PORT",
                   help=f"the Open Inference Protocol's gRPC port (LMVE_GRPC_PORT, default {env.grpc_port}; 0: off)")
    p.add_argument("--workers", type=int, default=env.workers, help="worker processes (LMVE_WORKERS)")
    p.add_argument("--log-level", default=env.log_level, help=f"LMVE_LOG_LEVEL (default {env.log_level})")
    p.add_argument("--debug", action="store_true", help="on a failure to start, the traceback too (else one line)")
    return p


def access_log(level: str) -> bool:
    """Whether uvicorn writes its access log at ``level``: only where the level shows it (info, debug, trace).
    uvicorn formats each request's access-log arguments (client, quoted path) before the logger checks
    its level, a few microseconds of every request even when nothing is written."""
    return level.lower() in ("debug", "info", "trace")


class StartupError(Exception):
    """Why ``lmve-serve`` cannot start, in one line naming the setting and the fix."""


def settings_error(exc: Exception) -> str:
    """A settings failure in one line: each bad variable, what it expects and what came."""
    from pydantic import ValidationError

    if not isinstance(exc, ValidationError):
        return str(exc).splitlines()[0]
    parts = []
    for e in exc.errors(include_url=False):
        name = "LMVE_" + "_".join(str(p) for p in e.get("loc", ())).upper() if e.get("loc") else "settings"
        got = f"; received {e['input']!s}" if "input" in e and not isinstance(e["input"], dict) else ""
        parts.append(f"{name}: {e.get('msg', '').removeprefix('Value error, ')}{got}")
    return "; ".join(parts)


def can_bind(host: str, port: int) -> bool:
    """Whether a listening socket can take ``host:port`` now (``SO_REUSEADDR``, as uvicorn and gRPC bind)."""
    import socket

    try:
        family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
    except socket.gaierror:
        return False
    with socket.socket(family, kind, proto) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(address)
        except OSError:
            return False
    return True


def preflight(args, env) -> None:
    """What would make the server fail once started, checked first: a bundle (repository) path that does not
    exist (unless ``LMVE_ALLOW_MISSING_BUNDLE``), an HTTP or gRPC port another process holds. Raises
    :class:`StartupError` naming the setting and the fix."""
    for flag, var, path in (("--bundle", "LMVE_BUNDLE", args.bundle),
                            ("--model-repository", "LMVE_MODEL_REPOSITORY", args.model_repository)):
        if path is not None and not Path(path).exists() and not env.allow_missing_bundle:
            raise StartupError(f"{flag} ({var}): {path} does not exist; train one (lmve-train --out DIR serves "
                               "DIR/bundle), or set LMVE_ALLOW_MISSING_BUNDLE=true to start not ready and load it "
                               "with POST /admin/reload once written")
    other = f"--port {args.port + 10}" + (f" --grpc-port {args.grpc_port + 10}" if args.grpc_port else "")
    for what, flag, var, port in (("HTTP", "--port", "LMVE_PORT", args.port),
                                  ("gRPC", "--grpc-port", "LMVE_GRPC_PORT", args.grpc_port)):
        if port and not can_bind(args.host, port):
            raise StartupError(f"{flag} ({var}): {args.host}:{port} is taken ({what}), perhaps by another "
                               f"lmve-serve; give this one free ports, e.g. lmve-serve {other}"
                               + (" (--grpc-port 0: no gRPC)" if what == "gRPC" else ""))


def main(argv: list[str] | None = None) -> int:
    """``lmve-serve``: 0 after a clean shutdown; 2, with one line on stderr, when it cannot start (``--debug``:
    with the traceback)."""
    given = argv if argv is not None else sys.argv[1:]
    debug = "--debug" in given
    try:
        return _serve(argv, given)
    except StartupError as exc:
        if debug:
            raise
        print(f"lmve-serve: {exc}", file=sys.stderr)
        return 2


def _serve(argv: list[str] | None, given: list[str]) -> int:
    """:func:`main` past its error handling."""
    from service.settings import ServiceSettings

    try:
        env = ServiceSettings()
    except ValueError as exc:  # e.g. LMVE_BUNDLE and LMVE_MODEL_REPOSITORY both set
        raise StartupError(settings_error(exc)) from exc
    parser = build_parser(env)
    args = parser.parse_args(argv)
    if args.bundle is not None and args.model_repository is not None:
        # the environment cannot set both (ServiceSettings refuses it): a flag set one, and the flag wins
        by_flag = {f for f in ("--bundle", "--model-repository") if any(a == f or a.startswith(f + "=") for a in given)}
        if by_flag == {"--model-repository"}:
            args.bundle = None
        elif by_flag == {"--bundle"}:
            args.model_repository = None
        else:
            parser.error("give --bundle or --model-repository, not both: a bundle is a repository of one")
    preflight(args, env)

    # one compute thread per worker unless told otherwise: N workers x M BLAS/OpenMP threads on
    # N cores oversubscribe them, and OpenMP's spin-waiting then costs far more than it gives
    threads = str(env.compute_threads)
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(var, threads)

    import logging

    import uvicorn

    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    # the factory reads settings from the environment in each worker process
    for var, value in (("LMVE_BUNDLE", args.bundle), ("LMVE_MODEL_REPOSITORY", args.model_repository),
                       ("LMVE_DEFAULT_MODEL", args.default_model)):
        if value is not None:
            os.environ[var] = str(value)
        else:
            os.environ.pop(var, None)
    os.environ["LMVE_HOST"], os.environ["LMVE_PORT"] = args.host, str(args.port)
    os.environ["LMVE_GRPC_PORT"], os.environ["LMVE_WORKERS"] = str(args.grpc_port), str(args.workers)
    if args.workers > 1 and env.state_url is None:
        # the workers must share one state (published bundle, feedback, adaptive level): without a
        # configured file they share a temporary one, which does not outlive this process
        import tempfile

        os.environ["LMVE_STATE_DB"] = str(Path(tempfile.mkdtemp(prefix="lmve-state-")) / "state.sqlite")
        logging.getLogger("lmve.service").warning(
            "%d workers and no LMVE_STATE_URL: sharing the temporary state %s (feedback and recalibrations are "
            "lost on restart; set LMVE_STATE_URL to sqlite:////a/file/on/a/writable/volume or postgresql://...)", args.workers,
            os.environ["LMVE_STATE_DB"])
    uvicorn.run("service.app:create_app", factory=True, host=args.host, port=args.port, workers=args.workers,
                log_level=args.log_level, timeout_graceful_shutdown=20, proxy_headers=False,
                access_log=access_log(args.log_level))
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
