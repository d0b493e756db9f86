"""The shift alarm on streams of queries: silent in the guarantee's own sense, loud at a new phone, user or day
(issue 71).

    python -m benchmarks.shift_alarm --seeds 0-9          # about 5 minutes on 2 cores

UJIIndoorLoc's TrainingData, the product's RSSI step and scaler fitted on each split's train part, and its
typicality step (:class:`models.typicality.Typicality`, defaults) with the service's test
(:class:`models.calibration.martingale.ShiftTest`, ``delta`` 0.01, the default tolerance). Per stream: the query
at which the alarm sounded (none within the stream: no alarm). Streams:

- ``position`` (``exchangeable``): the default split (grouped by position) of each seed; the calibration and
  test rows (positions held out of training) pooled, and per stream their positions re-drawn in two halves,
  one calibrating, the other's rows the stream (500 in random order): queries exchangeable with the
  calibration in the guarantee's own sense (a new position). 40 streams a seed.
- ``leave-phone-out``, ``leave-user-out``, ``leave-day-out`` (``shifted``): ``training.calibration.across.across_split``
  over PHONEID, USERID or the day of TIMESTAMP (UTC): the default model (calibrated at the training units'
  readings at held-out positions) queried by the held-out units (up to 500 rows in random order). 10 streams
  a seed. ``across``: the same streams against a model calibrated ``--calibrate-across`` the same column (each
  calibration row without its unit's reference rows): a new phone is then in the guarantee's sense.

Writes ``benchmarks/results/shift_alarm.{md,csv}`` (one row per protocol and model).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

from benchmarks.common import DATA_DIR, RESULTS, command, commit, parse_seeds, write_rows, write_text

OUT = RESULTS
DELTA, LENGTH = 0.01, 500
#: Typicality's parameters (--reference, --components; empty: its defaults)
PARAMS: dict = {}
SHIFTED = {"leave-phone-out": "PHONEID", "leave-user-out": "USERID", "leave-day-out": "DAY"}


def stream_alarm(typ, calibration: np.ndarray, scores: np.ndarray, seed: int) -> tuple[int | None, float]:
    """The query at which a new test against ``calibration`` alarmed over ``scores`` (None: never), and the
    stream's mean p-value among the calibration scores."""
    from models.calibration.martingale import ShiftTest
    from models.typicality import conformal_p_values

    test = ShiftTest(calibration, typ.edges_, delta=DELTA, seed=seed)
    test.update(scores)
    return test.alarm_at_, float(conformal_p_values(np.sort(calibration), scores).mean())


def position_streams(ds, seed: int, n: int) -> list[dict]:
    from models.typicality import Typicality
    from training.pipeline import TrainConfig, default_split, standardise

    config = TrainConfig(seed=seed, rssi="auto")
    split = default_split(ds, config)
    _, _, Xs = standardise(ds.X, split, config)
    typ = Typicality(seed=seed, **PARAMS).fit(Xs[split.train])
    held = np.concatenate([split.calibration, split.test])
    scores, groups = typ.scores(Xs[held]), ds.groups[held]
    positions = np.unique(groups)
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        half = rng.permutation(positions)[: len(positions) // 2]
        cal = np.isin(groups, half)
        rest = scores[~cal]
        stream = rest[rng.choice(len(rest), min(LENGTH, len(rest)), replace=False)]
        at, p = stream_alarm(typ, scores[cal], stream, 1000 * seed + i)
        out.append({"protocol": "position", "model": "default", "stream": "exchangeable", "seed": seed,
                    "alarm_at": at, "mean_p": p, "length": len(stream)})
    return out


def shifted_streams(ds, protocol: str, seed: int, n: int) -> list[dict]:
    from models.typicality import Typicality
    from training.calibration.across import across_split, unit_codes
    from training.pipeline import TrainConfig, standardise

    column = SHIFTED[protocol]
    split = across_split(ds, [column], seed, 0.9)
    config = TrainConfig(seed=seed, rssi="auto")
    _, _, Xs = standardise(ds.X, split, config)
    units = unit_codes(ds, [column])
    typ = Typicality(seed=seed, **PARAMS).fit(Xs[split.train], groups=units[split.train])
    models = {"default": typ.scores(Xs[split.calibration]),
              "across": typ.scores(Xs[split.calibration], units[split.calibration])}
    scores = typ.scores(Xs[split.test])
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        stream = scores[rng.choice(len(scores), min(LENGTH, len(scores)), replace=False)]
        for model, cal in models.items():
            at, p = stream_alarm(typ, cal, stream, 1000 * seed + i)
            out.append({"protocol": protocol, "model": model, "stream": "shifted" if model == "default" else
                        "in-sense", "seed": seed, "alarm_at": at, "mean_p": p, "length": len(stream)})
    return out


def summarise(runs: list[dict], argv: list[str], seconds: float) -> tuple[list[dict], str]:
    rows = []
    keys = sorted({(r["protocol"], r["model"], r["stream"]) for r in runs}, key=lambda k: (k[0] != "position", k))
    for protocol, model, stream in keys:
        part = [r for r in runs if (r["protocol"], r["model"], r["stream"]) == (protocol, model, stream)]
        at = [r["alarm_at"] for r in part if r["alarm_at"] is not None]
        rows.append({"dataset": "indoor_localization", "protocol": protocol, "stream": stream,
                     "n_streams": len(part), "alarm_rate": len(at) / len(part),
                     "median_delay": float(np.median(at)) if at else None, "model": model, "delta": DELTA,
                     "splits": len({r["seed"] for r in part}), "mean_length": float(np.mean([r["length"] for r in part])),
                     "mean_p": float(np.mean([r["mean_p"] for r in part]))})
    lines = ["## The shift alarm on streams of queries", "",
             f"Command: `{command('shift_alarm', argv)}` at commit {commit()} ({seconds:.0f} s). "
             "UJIIndoorLoc TrainingData; per split the product's RSSI step, scaler and typicality step fitted on "
             f"the train part; the service's shift test at delta {DELTA} (alarm at evidence {1 / DELTA:g}) and "
             "its default tolerance. `exchangeable`: held-out positions re-drawn between calibration and stream "
             "(the guarantee's own sense: the alarm rate must stay at most delta); `shifted`: the default "
             "model queried by held-out phones, users or days (`across_split`); `in-sense`: the same streams "
             "against a model calibrated across that column. Delay: the median query of the alarm among the "
             "streams that alarmed; mean p: the streams' mean typicality p-value.", "",
             "| protocol | model | stream | streams | splits | mean length | alarm rate | median delay | mean p |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        delay = "-" if r["median_delay"] is None else f"{r['median_delay']:.0f}"
        lines.append(f"| {r['protocol']} | {r['model']} | {r['stream']} | {r['n_streams']} | {r['splits']} | "
                     f"{r['mean_length']:.0f} | {100 * r['alarm_rate']:.1f} % | {delay} | {r['mean_p']:.3f} |")
    return rows, "\n".join(lines) + "\n"


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seeds", default="0-9", help="splits per protocol (position: 40 streams each, shifted: 10)")
    p.add_argument("--position-seeds", default="0-4")
    p.add_argument("--data-dir", type=Path, default=DATA_DIR)
    p.add_argument("--reference", type=int, help="Typicality.max_reference (default: its default)")
    p.add_argument("--components", type=int, help="Typicality.n_components (default: its default)")
    p.add_argument("--out", default="shift_alarm", help="the results' stem under benchmarks/results/")
    args = p.parse_args(argv)
    PARAMS.update({k: v for k, v in (("max_reference", args.reference), ("n_components", args.components)) if v})
    from training.data.datasets import group_by_position, load_dataset

    t0 = time.perf_counter()
    ds = group_by_position(load_dataset("indoor_localization", args.data_dir))
    ds.meta["DAY"] = np.asarray(ds.meta["TIMESTAMP"]) // 86400
    runs = []
    for seed in parse_seeds(args.position_seeds):
        runs += position_streams(ds, seed, 40)
        print(f"position seed {seed}: {sum(r['alarm_at'] is not None for r in runs[-40:])} alarms of 40", flush=True)
    for protocol in SHIFTED:
        for seed in parse_seeds(args.seeds):
            new = shifted_streams(ds, protocol, seed, 10)
            runs += new
            print(f"{protocol} seed {seed}: default {sum(r['alarm_at'] is not None for r in new if r['model'] == 'default')}"
                  f", across {sum(r['alarm_at'] is not None for r in new if r['model'] == 'across')} alarms of 10",
                  flush=True)
    rows, text = summarise(runs, argv, time.perf_counter() - t0)
    write_rows(OUT / f"{args.out}.csv", rows, list(rows[0]))
    write_text(OUT / f"{args.out}.md", text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
