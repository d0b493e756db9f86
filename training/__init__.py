"""lmve.training: data, the split protocol, fitting and calibration, the ``lmve-*`` training commands.

Needs the ``train`` extra (torch, pandas, matplotlib, tqdm, joblib); the base install serves only.
"""

from __future__ import annotations

import importlib.util
import sys

TRAINING_MODULES = ("torch", "pandas", "matplotlib", "tqdm", "joblib")


def run_command(prog: str, parser, run, argv: list[str] | None = None, needs=TRAINING_MODULES) -> int:
    """An ``lmve-*`` command's ``main``: check the training install has ``needs`` (default: all of the
    ``train`` extra), parse ``argv`` with ``parser``, call ``run(args)``; an
    :class:`~models.exceptions.LMVEError` becomes ``prog: error: ...`` on stderr and exit status 2."""
    from models.exceptions import LMVEError

    require_training_install(prog, needs)
    args = parser.parse_args(argv)
    try:
        return run(args)
    except LMVEError as exc:
        print(f"{prog}: error: {exc}", file=sys.stderr)
        return 2


def require_training_install(prog: str, needs=TRAINING_MODULES) -> None:
    """Exit with a message naming what is missing when the ``train`` extra's modules ``needs`` are not installed."""
    missing = [m for m in needs if importlib.util.find_spec(m) is None]
    if missing:
        sys.exit(f"{prog}: error: {', '.join(missing)} not installed: this is a serving-only install. "
                 "Install the training extra: pip install 'lmve[train]'")
