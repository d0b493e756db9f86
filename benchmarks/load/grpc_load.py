"""gRPC load from ``h2load`` (nghttp2's HTTP/2 load generator, in C: Debian's ``nghttp2-client``): unary calls as
HTTP/2 POSTs of one length-prefixed protobuf message, with gRPC's headers.

``h2load`` reads the HTTP status only; a gRPC error travels in the trailers (``grpc-status``), so callers check
the server's own count of non-OK calls (``lmve_grpc_requests_total``) before trusting a rate.
"""

from __future__ import annotations

import re
import struct
import subprocess
from pathlib import Path

from benchmarks.load.run_load import KEY

METHOD = "/inference.GRPCInferenceService/ModelInfer"


def frame(message: bytes) -> bytes:
    """One gRPC message on the wire: not compressed (0), its length (4 bytes, big-endian), the bytes."""
    return b"\x00" + struct.pack(">I", len(message)) + message


def h2load(port: int, body: Path, duration: int, clients: int, streams: int = 1) -> dict:
    """``h2load -t1`` calling ModelInfer with ``body`` (a :func:`frame`) for ``duration`` s from ``clients``
    connections of ``streams`` concurrent calls each: ``rps``, ``requests``, ``errors`` (non-2xx HTTP, failed)."""
    out = subprocess.run(["h2load", "-t1", f"-c{clients}", f"-m{streams}", "-D", str(duration), "-d", str(body),
                          "-H", "content-type: application/grpc", "-H", "te: trailers", "-H", f"x-api-key: {KEY}",
                          f"http://127.0.0.1:{port}{METHOD}"], capture_output=True, text=True, timeout=duration + 60)
    rate = re.search(r"finished in [\d.]+s, ([\d.]+) req/s", out.stdout)
    counts = re.search(r"requests: (\d+) total, \d+ started, \d+ done, (\d+) succeeded, (\d+) failed, (\d+) errored",
                       out.stdout)
    codes = re.search(r"status codes: (\d+) 2xx", out.stdout)
    if rate is None or counts is None or codes is None:
        raise RuntimeError(f"h2load printed no summary:\n{out.stdout}\n{out.stderr}")
    total, ok = int(counts.group(1)), int(codes.group(1))
    return {"rps": float(rate.group(1)), "requests": total,
            "errors": int(counts.group(3)) + int(counts.group(4)) + (int(counts.group(2)) - ok)}
