"""Watching the radio a model is sent, without labels: which survey transmitters the traffic still hears, which
new ones it hears, and the readings' signal offset.

:class:`RadioBaseline` is what the survey saw of each transmitter (an RSSI feature): the share of its rows that
heard it and its mean reading when heard. :class:`RadioWatch` keeps the same figures for the traffic, as counts
decayed over about :attr:`~RadioWatch.half_life` queries, overall and per named device, and decides a
:class:`RadioView` (:meth:`RadioWatch.view`; nothing before ``min_queries`` decayed queries):

* **gone**: heard in a share ``p`` of the survey's rows, expected ``e = p n >= min_expected`` times in ``n``
  queries, heard fewer than ``gone_ratio e`` times; or not heard at all over the last rows in which it was
  expected ``silent_expected`` times (sooner than the decayed counts). It comes back once heard ``back_ratio
  e`` times (no flicker). At most ``max_gone_share`` of the survey's transmitters are gone, the least heard
  first: what is left must still match the survey;
* **new**: heard in ``new_share`` of the queries (and ``min_new_rows`` rows), and by the radio map in under
  ``new_ratio`` of that share and at most ``new_max_rate`` of its rows (never, or at a few re-walked
  positions): it reads "not heard", as in the survey. Traffic from one corner, which hears that corner's
  transmitters in every query, makes none of them new;
* **offset**: the median, weighted by the traffic's rows, of the traffic's mean reading minus the survey's over
  the live transmitters both heard ``min_heard`` times; decided on ``min_transmitters`` of them, applied from
  ``deadband_db``, at most ``max_offset_db``. Per device with ``min_queries`` of its own, else the traffic's.

:meth:`RadioView.apply` is what answering does with a decision: gone and new transmitters read "not heard",
the offset taken off every heard reading. The state is plain values (:meth:`RadioWatch.state`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from models.exceptions import InputError
from models.preprocessing import READING_RANGE

#: the key of the traffic as a whole among the devices
ALL = "*"


@dataclass(frozen=True)
class RadioBaseline:
    """What the survey heard: per feature whether it is RSSI, its not-heard code, the share of survey rows that
    heard it and its mean reading there (dBm; NaN where never heard)."""

    rssi: np.ndarray
    unheard: np.ndarray
    rate: np.ndarray
    mean: np.ndarray

    @classmethod
    def of(cls, X: np.ndarray, rssi: np.ndarray, unheard: np.ndarray) -> "RadioBaseline":
        """The baseline of raw survey rows ``X`` (m, d), given each feature's RSSI flag and not-heard code."""
        X = np.asarray(X, dtype=np.float64)
        heard = heard_mask(X, rssi, unheard)
        count = heard.sum(axis=0)
        with np.errstate(invalid="ignore", divide="ignore"):
            mean = np.where(count > 0, np.where(heard, X, 0.0).sum(axis=0) / np.maximum(count, 1), np.nan)
        return cls(rssi=np.asarray(rssi, bool), unheard=np.asarray(unheard, np.float64),
                   rate=count / max(len(X), 1), mean=mean)

    @property
    def surveyed(self) -> np.ndarray:
        """(d,) bool: the transmitters the survey heard."""
        return self.rssi & (self.rate > 0)


def heard_mask(X: np.ndarray, rssi: np.ndarray, unheard: np.ndarray) -> np.ndarray:
    """(m, d) bool: the readings of ``X`` that are real readings of an RSSI feature: in the readings' range
    (:data:`models.preprocessing.READING_RANGE`; a code is outside it) and not the feature's not-heard value."""
    lo, hi = READING_RANGE
    with np.errstate(invalid="ignore"):
        return rssi[None, :] & (X >= lo) & (X <= hi) & (X != unheard[None, :])


@dataclass(frozen=True)
class RadioView:
    """A decision: ``gone`` and ``new`` transmitters (feature indices), the signal ``offsets`` in dB by device
    (:data:`ALL`: the traffic as a whole, what a device without its own is corrected by)."""

    gone: tuple[int, ...] = ()
    new: tuple[int, ...] = ()
    offsets: dict = field(default_factory=dict)

    @property
    def empty(self) -> bool:
        """Whether the view changes nothing (the survey's radio)."""
        return not self.gone and not self.new and not any(self.offsets.values())

    def offset(self, device: str | None) -> float:
        """The offset a query of ``device`` is corrected by (its own, else the traffic's, else 0)."""
        if device is not None and device in self.offsets:
            return float(self.offsets[device])
        return float(self.offsets.get(ALL, 0.0))

    def apply(self, X: np.ndarray, baseline: RadioBaseline, device: str | None = None) -> np.ndarray:
        """Raw rows ``X`` (changed in place) as the survey would read them: the offset taken off every heard
        reading, gone and new transmitters "not heard"."""
        off = self.offset(device)
        if off:
            heard = heard_mask(X, baseline.rssi, baseline.unheard)
            X[heard] -= off
        masked = list(self.gone) + list(self.new)
        if masked:
            X[:, masked] = baseline.unheard[masked]
        return X

    def key(self) -> tuple:
        """What identifies the decision (equal keys: the same answers)."""
        return self.gone, self.new, tuple(sorted((k, round(float(v), 1)) for k, v in self.offsets.items()))

    def to_dict(self, names: list[str] | None = None) -> dict:
        out = {"gone": list(self.gone), "new": list(self.new),
               "offsets_db": {k: round(float(v), 2) for k, v in self.offsets.items()}}
        if names is not None:
            out["gone_names"] = [names[j] for j in self.gone]
            out["new_names"] = [names[j] for j in self.new]
        return out


@dataclass(frozen=True)
class RadioTally:
    """What a run of rows adds to a watch (:meth:`RadioWatch.tally`): ``rows``, per key (:data:`ALL` and each
    named device) ``(rows, weighted rows, (d,) weighted heard counts, (d,) weighted sums of heard readings)``,
    and ``since`` (d,): rows after the last one that heard each feature (-1: none did)."""

    rows: int
    counts: dict
    since: np.ndarray


class RadioWatch:
    """Decayed counts of the traffic's readings, and the decision they support (see the module).

    Parameters
    ----------
    baseline : RadioBaseline
    half_life : float, default=1000
        Queries after which a query weighs half.
    min_queries : float, default=200
        Decayed queries before anything is decided (per device: before its own offset).
    min_expected, gone_ratio, back_ratio : float, default=20, 0.1, 0.3
    silent_expected : float, default=60
    max_gone_share : float, default=0.75
    new_share, min_new_rows, new_ratio, new_max_rate : float, default=0.01, 5, 0.25, 0.02
    min_heard, min_transmitters : int, default=20, 5
    deadband_db, max_offset_db : float, default=1.5, 15
    max_devices : int, default=64
        Devices kept (the least seen forgotten beyond).
    """

    def __init__(self, baseline: RadioBaseline, half_life: float = 1000.0, min_queries: float = 200.0,
                 min_expected: float = 20.0, gone_ratio: float = 0.1, back_ratio: float = 0.3,
                 silent_expected: float = 60.0,
                 max_gone_share: float = 0.75, new_share: float = 0.01, min_new_rows: float = 5.0,
                 new_ratio: float = 0.25, new_max_rate: float = 0.02,
                 min_heard: int = 20, min_transmitters: int = 5, deadband_db: float = 1.5,
                 max_offset_db: float = 15.0, max_devices: int = 64):
        if not half_life > 0:
            raise InputError(f"half_life must be positive; got {half_life!r}", field="half_life",
                             expected="> 0", received=repr(half_life))
        if not 0 < gone_ratio < back_ratio <= 1:
            raise InputError(f"need 0 < gone_ratio < back_ratio <= 1; got {gone_ratio}, {back_ratio}",
                             field="gone_ratio", expected="0 < gone_ratio < back_ratio <= 1",
                             received=f"{gone_ratio}, {back_ratio}")
        self.baseline = baseline
        self.half_life, self.min_queries, self.min_expected = float(half_life), float(min_queries), float(min_expected)
        self.gone_ratio, self.back_ratio, self.max_gone_share = float(gone_ratio), float(back_ratio), float(max_gone_share)
        self.silent_expected = float(silent_expected)
        self.new_share, self.min_new_rows, self.new_ratio = float(new_share), float(min_new_rows), float(new_ratio)
        self.new_max_rate = float(new_max_rate)
        self.min_heard, self.min_transmitters = int(min_heard), int(min_transmitters)
        self.deadband_db, self.max_offset_db, self.max_devices = float(deadband_db), float(max_offset_db), int(max_devices)
        self.reset()

    # ------------------------------------------------------------------ counting
    def reset(self) -> None:
        """Forget the traffic: the survey's radio until the evidence says otherwise."""
        d = len(self.baseline.rssi)
        #: device -> [decayed queries, (d,) decayed heard counts, (d,) decayed sums of heard readings]
        self.counts: dict[str, list] = {ALL: [0.0, np.zeros(d), np.zeros(d)]}
        #: (d,) rows of the traffic since each feature was last heard
        self.silent = np.zeros(d)
        self.seen = 0
        self._gone: set[int] = set()

    def observe(self, X: np.ndarray, device: str | None = None) -> None:
        """Count raw rows ``X`` (m, d) as sent (before any correction), of ``device`` when named; the same as
        :meth:`add` of their :meth:`tally`."""
        self.add(self.tally([(X, device)]))

    def tally(self, parts) -> "RadioTally":
        """What the rows of ``parts`` (``(rows, device)`` pairs in arrival order; rows as sent, ``None`` or NaN
        for not heard) add to the counts, computed without them (outside the state's transaction). Every row
        weighs as if counted alone: the later of two rows ``j`` rows apart weighs ``2 ** (j / half_life)`` times
        more, so that a batch counts as the same rows one by one. Parts of another row length are skipped."""
        d = len(self.baseline.rssi)
        blocks, devices = [], []
        for rows, device in parts:
            X = np.asarray(rows, dtype=np.float64)  # None (not heard) becomes NaN: never a reading
            if X.ndim == 2 and X.shape[1] == d and len(X):
                blocks.append(X)
                devices.append(ALL if device is None else str(device))
        if not blocks:
            return RadioTally(rows=0, counts={}, since=np.full(d, -1.0))
        X = np.concatenate(blocks) if len(blocks) > 1 else blocks[0]
        heard = heard_mask(X, self.baseline.rssi, self.baseline.unheard)
        values = np.where(heard, X, 0.0)
        since = np.where(heard.any(axis=0), np.argmax(heard[::-1], axis=0), -1)  # rows after the last that heard it
        counts = {ALL: self._weighed(heard, values)}
        owner = np.repeat(np.array(devices, dtype=object), [len(b) for b in blocks])
        for key in dict.fromkeys(devices):
            if key != ALL:
                mine = owner == key
                counts[key] = self._weighed(heard[mine], values[mine])
        return RadioTally(rows=len(X), counts=counts, since=since.astype(np.float64))

    def _weighed(self, heard: np.ndarray, values: np.ndarray) -> tuple[int, float, np.ndarray, np.ndarray]:
        """``(rows, weighted rows, weighted heard counts, weighted sums)`` of a run of rows, the last weighing 1."""
        m = len(heard)
        w = 0.5 ** (np.arange(m - 1, -1, -1, dtype=np.float64) / self.half_life)
        return m, float(w.sum()), w @ heard, w @ values

    def add(self, tally: "RadioTally") -> None:
        """Add a :meth:`tally` to the counts (the older counts decayed by its rows)."""
        if not tally.rows:
            return
        self.silent = np.where(tally.since >= 0, tally.since, self.silent + tally.rows)
        for key, (m, weight, h, s) in tally.counts.items():
            if key not in self.counts:
                self._room()
                self.counts[key] = [0.0, np.zeros_like(h), np.zeros_like(s)]
            c = self.counts[key]
            decay = 0.5 ** (m / self.half_life)
            c[0] = c[0] * decay + weight
            c[1] = c[1] * decay + h
            c[2] = c[2] * decay + s
        self.seen += tally.rows

    def _room(self) -> None:
        devices = [k for k in self.counts if k != ALL]
        if len(devices) >= self.max_devices:
            del self.counts[min(devices, key=lambda k: self.counts[k][0])]

    # ------------------------------------------------------------------ deciding
    def view(self) -> RadioView:
        """The decision the counts support now (see the module); the gone set's hysteresis is kept."""
        n, heard, sums = self.counts[ALL]
        if n < self.min_queries:
            return RadioView()
        gone = self._decide_gone(n, heard)
        b = self.baseline
        new = np.flatnonzero(b.rssi & (heard >= max(self.min_new_rows, self.new_share * n))
                             & (b.rate < self.new_ratio * heard / n) & (b.rate <= self.new_max_rate))
        offsets = {}
        for key, (m, h, s) in self.counts.items():
            if key != ALL and m < self.min_queries:
                continue  # a device with few queries of its own: the traffic's offset
            off = self._offset(h, s, gone)
            if off is not None:
                offsets[key] = off if abs(off) >= self.deadband_db else 0.0
        return RadioView(gone=tuple(int(j) for j in gone), new=tuple(int(j) for j in new), offsets=offsets)

    def _decide_gone(self, n: float, heard: np.ndarray) -> list[int]:
        b = self.baseline
        expected = b.rate * n
        judged = b.surveyed & (expected >= self.min_expected)
        ratio = np.where(judged, heard / np.maximum(expected, 1e-12), np.inf)
        was = np.zeros(len(ratio), dtype=bool)
        was[list(self._gone)] = True
        silent = b.rate * np.minimum(self.silent, self.seen) >= self.silent_expected
        gone = judged & ((ratio < self.gone_ratio) | silent | (was & (ratio < self.back_ratio)))
        cap = int(np.floor(self.max_gone_share * b.surveyed.sum()))
        chosen = np.flatnonzero(gone)
        if len(chosen) > cap:  # the least heard first
            chosen = np.sort(chosen[np.argsort(ratio[chosen], kind="stable")[:cap]])
        self._gone = set(int(j) for j in chosen)
        return sorted(self._gone)

    def _offset(self, h: np.ndarray, s: np.ndarray, gone) -> float | None:
        b = self.baseline
        common = b.surveyed & (h >= self.min_heard) & (b.rate > 0)
        common[list(gone)] = False
        if common.sum() < self.min_transmitters:
            return None
        diff = s[common] / h[common] - b.mean[common]
        order = np.argsort(diff, kind="stable")
        w = np.cumsum(h[common][order])
        off = float(diff[order][int(np.searchsorted(w, w[-1] / 2))])
        return float(np.clip(off, -self.max_offset_db, self.max_offset_db))

    # ------------------------------------------------------------------ the stored form
    def state(self) -> dict:
        """The counts and the gone set as plain JSON values."""
        return {"seen": int(self.seen), "gone": sorted(self._gone), "silent": self.silent.astype(int).tolist(),
                "counts": {k: [float(c[0]), c[1].round(6).tolist(), c[2].round(4).tolist()]
                           for k, c in self.counts.items()}}

    def restore(self, state: dict) -> "RadioWatch":
        """The counts of :meth:`state` (of a watch over the same features)."""
        d = len(self.baseline.rssi)
        counts = {}
        for key, (m, h, s) in state["counts"].items():
            h, s = np.asarray(h, dtype=np.float64), np.asarray(s, dtype=np.float64)
            if h.shape != (d,) or s.shape != (d,):
                raise InputError(f"the stored radio state has {h.shape[0]} features; the model has {d}",
                                 field="radio", expected=f"{d} features", received=str(h.shape[0]))
            counts[str(key)] = [float(m), h, s]
        counts.setdefault(ALL, [0.0, np.zeros(d), np.zeros(d)])
        self.counts, self.seen = counts, int(state.get("seen", 0))
        silent = np.asarray(state.get("silent", np.zeros(d)), dtype=np.float64)
        self.silent = silent if silent.shape == (d,) else np.zeros(d)
        self._gone = {int(j) for j in state.get("gone", ())}
        return self
