"""``python -m service.open_inference.pb [OUT]``: generate ``inference_pb2.py`` from ``inference.proto``
(grpcio-tools, a dev dependency) into ``OUT`` (default: beside the proto). The generated module is committed;
``tests/service/open_inference/test_pb.py`` checks that it matches the proto."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
PROTO = "service/open_inference/pb/inference.proto"


def generate(out: Path) -> None:
    """Run protoc (grpc_tools) on :data:`PROTO`, writing the modules under ``out`` as ``service/open_inference/pb/``."""
    from grpc_tools import protoc

    out.mkdir(parents=True, exist_ok=True)
    code = protoc.main(["protoc", f"-I{ROOT}", f"--python_out={out}", str(ROOT / PROTO)])
    if code != 0:
        raise SystemExit(f"protoc failed on {PROTO} (exit {code})")


if __name__ == "__main__":
    generate(Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT)
