"""Watching the radio a model is sent, without labels: which survey transmitters the traffic still hears, which
new ones it hears, and the readings' signal offset.

:class:`RadioBaseline` is what the survey saw of each transmitter, overall and per *profile* (the survey's
rows grouped by position, at most :data:`MAX_PROFILES`). Each query row is matched to its :data:`NEAREST`
profiles by the readings it hears only, and what the survey heard there is what the row is *expected* to
hear: traffic that walks one corner expects that corner's transmitters. Without positions there is one
profile.

:class:`RadioWatch` keeps counts decayed over about ``half_life`` queries (overall and per named device) of
how often each transmitter was heard, how often expected, and how far its readings were from the matched
profiles', and decides a :class:`RadioView` (nothing before ``min_queries`` decayed queries):

* **gone**: expected ``e >= min_expected`` times, heard fewer than ``gone_ratio e``; or silent since it was
  last expected ``silent_expected`` times. Back once heard ``back_ratio e`` times (``e >= min_expected``). At most
  ``max_gone_share`` of the survey's, the least heard first;
* **new**: heard in ``new_share`` of the queries (and ``min_new_rows`` rows), expected under ``new_ratio`` of
  that, and heard by at most ``new_max_rate`` of the map's rows; it reads "not heard", as in the survey;
* **offset**: the weighted median over live transmitters heard ``min_heard`` times of the traffic's mean
  reading minus the matched profiles', less the matching's own bias; on ``min_transmitters`` of them, from
  ``deadband_db``, at most ``max_offset_db``; per device with ``min_queries`` of its own, else the traffic's.

A flush matches at most :data:`MAX_MATCHED` rows of a tally (``rows x profiles x
transmitters``). :meth:`RadioView.apply` is what answering does with a decision: gone and new transmitters
read "not heard", the offset taken off every heard reading. The state is plain values
(:meth:`RadioWatch.state`).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

import numpy as np

from models.exceptions import InputError
from models.preprocessing import READING_RANGE

#: the key of the traffic as a whole among the devices
ALL = "*"
#: position groups of the survey kept as profiles at most (positions beyond grouped about a seeded subset)
MAX_PROFILES = 256
#: profiles a query row is matched to
NEAREST = 3
#: rows of a tally matched to profiles at most (evenly spaced)
MAX_MATCHED = 512
#: readings of prior weight on "no shift" when a row's mean difference to a profile is taken off in matching
SHIFT_PRIOR = 1.0
#: the largest mean difference (dB) taken off in matching: a profile that hears none of a row's transmitters
#: (all at FLOOR_DBM) is not made near by a shift of tens of dB
MAX_SHIFT_DB = 15.0
#: survey rows (a seeded subset) that measure the matching's own bias, and the readings a transmitter needs there
BIAS_ROWS, MIN_BIAS_READINGS = 2048, 10
#: the reading (dBm) a profile's fingerprint gives a transmitter where it is not heard
FLOOR_DBM = -105.0


@dataclass(frozen=True)
class RadioBaseline:
    """What the survey heard: per feature whether it is RSSI, its not-heard code, the share of survey rows that
    heard it and its mean reading there (dBm; NaN where never heard); per profile (P of them, position groups
    of the survey) the same two, ``profile_rate`` (P, d) and ``profile_mean`` (P, d, 0 where never heard); and
    ``bias`` (d,): what the survey's own rows, each matched to the profiles of other positions, read above the
    matched profiles' means (what :meth:`RadioWatch.view`'s offset takes off, so that a reading taken as the
    survey's were measures no offset; zeros with one profile)."""

    rssi: np.ndarray
    unheard: np.ndarray
    rate: np.ndarray
    mean: np.ndarray
    profile_rate: np.ndarray
    profile_mean: np.ndarray
    bias: np.ndarray | None = None

    @classmethod
    def of(cls, X: np.ndarray, rssi: np.ndarray, unheard: np.ndarray, positions: np.ndarray | None = None,
           seed: int = 0) -> "RadioBaseline":
        """The baseline of raw survey rows ``X`` (m, d), given each feature's RSSI flag and not-heard code;
        ``positions`` (m, n): the rows' positions, grouped into profiles (``None``: one profile)."""
        X = np.asarray(X, dtype=np.float64)
        rssi, unheard = np.asarray(rssi, bool), np.asarray(unheard, np.float64)
        heard = heard_mask(X, rssi, unheard)
        count = heard.sum(axis=0)
        with np.errstate(invalid="ignore", divide="ignore"):
            mean = np.where(count > 0, np.where(heard, X, 0.0).sum(axis=0) / np.maximum(count, 1), np.nan)
        groups = position_groups(positions, len(X), seed)
        order = np.argsort(groups, kind="stable")
        starts = np.flatnonzero(np.r_[True, np.diff(groups[order]) != 0])
        sizes = np.diff(np.r_[starts, len(X)]).astype(np.float64)[:, None]
        h = np.add.reduceat(heard[order].astype(np.float64), starts, axis=0) if len(X) else np.zeros((1, X.shape[1]))
        v = np.add.reduceat(np.where(heard, X, 0.0)[order], starts, axis=0) if len(X) else np.zeros((1, X.shape[1]))
        sizes = sizes if len(X) else np.ones((1, 1))
        out = cls(rssi=rssi, unheard=unheard, rate=count / max(len(X), 1), mean=mean,
                  profile_rate=(h / sizes).astype(np.float32),
                  profile_mean=np.where(h > 0, v / np.maximum(h, 1), 0.0).astype(np.float32))
        bias = np.zeros(X.shape[1])
        if len(out.profile_rate) > 1:  # the survey's rows at "new" positions: each matched without its own
            rows = np.sort(np.random.default_rng(seed).choice(len(X), min(len(X), BIAS_ROWS), replace=False))
            ranks = np.unique(groups, return_inverse=True)[1].ravel()
            _, mu = out.expect(X[rows], heard[rows], exclude=ranks[rows])
            known = heard[rows] & np.isfinite(mu)
            n = known.sum(axis=0)
            total = np.where(known, X[rows] - np.where(known, mu, 0.0), 0.0).sum(axis=0)
            bias = np.where(n >= MIN_BIAS_READINGS, total / np.maximum(n, 1), 0.0)
        return dataclasses.replace(out, bias=bias)

    @property
    def surveyed(self) -> np.ndarray:
        """(d,) bool: the transmitters the survey heard."""
        return self.rssi & (self.rate > 0)

    def expect(self, X: np.ndarray, heard: np.ndarray,
               exclude: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """``(p, mu)``, each (m, d): for raw rows ``X`` (``heard``: their :func:`heard_mask`), the chance that
        the survey heard each transmitter at the rows' nearest profiles, and its mean reading there (NaN where
        those profiles never heard it); ``exclude`` (m,): a profile each row is not matched to. A row that
        hears nothing expects nothing."""
        P = len(self.profile_rate)
        if P == 1:
            p = np.broadcast_to(self.rate, X.shape).copy()
            return p, np.broadcast_to(self.mean, X.shape).copy()
        r = self.surveyed  # a transmitter the survey never heard tells nothing of where a row was taken
        F = (self.profile_rate * self.profile_mean + (1 - self.profile_rate) * FLOOR_DBM)[:, r]  # (P, dr)
        h = heard[:, r].astype(np.float32)
        x = np.where(heard, X, 0.0)[:, r].astype(np.float32)
        n = np.maximum(h.sum(axis=1), 1.0)[:, None]
        # over the readings each row hears, the squared distance to each profile once their mean difference is
        # taken off (shrunk by SHIFT_PRIOR readings, at most MAX_SHIFT_DB): a row read some dB off still matches
        # where it was taken, not where the survey read that much louder, and the offset is measured, not absorbed
        hF = h @ F.T
        s1 = (h * x).sum(axis=1)[:, None] - hF  # sum h (x - F)
        s2 = (h * x * x).sum(axis=1)[:, None] - 2 * (h * x) @ F.T + h @ (F * F).T  # sum h (x - F)^2
        shift = np.clip(s1 / (n + SHIFT_PRIOR), -MAX_SHIFT_DB, MAX_SHIFT_DB)
        dist = (s2 - 2 * shift * s1 + n * shift * shift) / n
        if exclude is not None:
            dist[np.arange(len(dist)), exclude] = np.inf
        k = min(NEAREST, P)
        near = np.argpartition(dist, k - 1, axis=1)[:, :k]
        w = 1.0 / (np.sqrt(np.maximum(np.take_along_axis(dist, near, axis=1), 0.0)) + 1.0)
        w /= w.sum(axis=1, keepdims=True)
        rate = self.profile_rate[near]  # (m, k, d)
        wr = w[:, :, None] * rate
        p = wr.sum(axis=1)
        with np.errstate(invalid="ignore", divide="ignore"):
            mu = np.where(p > 0, (wr * self.profile_mean[near]).sum(axis=1) / p, np.nan)
        nothing = h.sum(axis=1) == 0
        p[nothing] = 0.0
        return p.astype(np.float64), mu.astype(np.float64)


def position_groups(positions: np.ndarray | None, m: int, seed: int = 0) -> np.ndarray:
    """(m,) int: each row's profile, rows at one position together, at most :data:`MAX_PROFILES` groups (each
    row with the nearest of a seeded subset of the positions beyond); all ``0`` without positions."""
    if positions is None or m == 0:
        return np.zeros(m, dtype=np.int64)
    pos = np.asarray(positions, dtype=np.float64).reshape(m, -1)
    pos = np.where(np.isfinite(pos), pos, 0.0)
    unique, groups = np.unique(pos.round(6), axis=0, return_inverse=True)
    groups = groups.ravel()
    if len(unique) <= MAX_PROFILES:
        return groups.astype(np.int64)
    seeds = unique[np.sort(np.random.default_rng(seed).choice(len(unique), MAX_PROFILES, replace=False))]
    out = np.empty(m, dtype=np.int64)
    for i in range(0, m, 4096):
        block = pos[i:i + 4096]
        out[i:i + 4096] = ((block[:, None, :] - seeds[None, :, :]) ** 2).sum(axis=2).argmin(axis=1)
    return np.unique(out, return_inverse=True)[1].ravel().astype(np.int64)


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
    """What a run of rows adds to a watch (:meth:`RadioWatch.tally`): ``rows``; per key (:data:`ALL` and each
    named device) ``(rows, weighted rows, h, e, r, c)``, each of the last four (d,) and weighted: times heard,
    times expected, the sum of heard readings minus the survey's at the matched profiles, and how many readings
    that sum has; ``heard`` (d,): whether any row heard each feature; ``since`` (d,): the times it was expected
    after the last row that heard it (over every row where none did)."""

    rows: int
    counts: dict
    heard: np.ndarray
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
        #: device -> [decayed queries, then (d,) decayed: heard, expected, reading residual sums and counts]
        self.counts: dict[str, list] = {ALL: self._empty()}
        #: (d,) times each feature was expected since it was last heard
        self.silent = np.zeros(d)
        self.seen = 0
        self._gone: set[int] = set()

    def _empty(self) -> list:
        d = len(self.baseline.rssi)
        return [0.0] + [np.zeros(d) for _ in range(4)]

    def observe(self, X: np.ndarray, device: str | None = None) -> None:
        """Count raw rows ``X`` (m, d) as sent (before any correction), of ``device`` when named; the same as
        :meth:`add` of their :meth:`tally`."""
        self.add(self.tally([(X, device)]))

    def tally(self, parts) -> "RadioTally":
        """What the rows of ``parts`` (``(rows, device)`` pairs in arrival order; rows as sent, ``None`` or NaN
        for not heard) add to the counts, computed without them (outside the state's transaction). Every row
        weighs as if counted alone: the later of two rows ``j`` rows apart weighs ``2 ** (j / half_life)`` times
        more, so that a batch counts as the same rows one by one (exactly with one profile; with more, at most
        :data:`MAX_MATCHED` rows are matched). Parts of another row length are skipped."""
        d = len(self.baseline.rssi)
        blocks, devices = [], []
        for rows, device in parts:
            X = np.asarray(rows, dtype=np.float64)  # None (not heard) becomes NaN: never a reading
            if X.ndim == 2 and X.shape[1] == d and len(X):
                blocks.append(X)
                devices.append(ALL if device is None else str(device))
        if not blocks:
            return RadioTally(rows=0, counts={}, heard=np.zeros(d, bool), since=np.zeros(d))
        X = np.concatenate(blocks) if len(blocks) > 1 else blocks[0]
        m = len(X)
        heard = heard_mask(X, self.baseline.rssi, self.baseline.unheard)
        # the matched rows, evenly spaced, the last always among them; each stands for m / len(matched) rows
        step = -(-m // MAX_MATCHED) if len(self.baseline.profile_rate) > 1 else 1
        matched = np.arange(m - 1, -1, -step)[::-1]
        p, mu = self.baseline.expect(X[matched], heard[matched])
        known = heard[matched] & np.isfinite(mu)
        resid = np.where(known, X[matched] - np.where(known, mu, 0.0), 0.0)
        last = np.where(heard.any(axis=0), m - 1 - np.argmax(heard[::-1], axis=0), -1)  # the last row that heard it
        after = np.vstack([np.cumsum(p[::-1], axis=0)[::-1], np.zeros((1, d))])  # expected from a matched row on
        since = after[np.searchsorted(matched, last, side="right"), np.arange(d)] * step
        owner = np.repeat(np.array(devices, dtype=object), [len(b) for b in blocks])
        counts = {}
        for key in [ALL] + [k for k in dict.fromkeys(devices) if k != ALL]:
            mine = np.ones(m, bool) if key == ALL else owner == key
            w = np.zeros(m)  # a key's rows weigh by their place among its own rows, the last 1
            w[mine] = 0.5 ** (np.arange(mine.sum() - 1, -1, -1, dtype=np.float64) / self.half_life)
            wm = w[matched]
            scale = w.sum() / max(wm.sum(), 1e-300)  # the matched rows stand for all of the key's rows
            counts[key] = (int(mine.sum()), float(w.sum()), w @ heard,
                           scale * (wm @ p), scale * (wm @ resid), scale * (wm @ known))
        return RadioTally(rows=m, counts=counts, heard=heard.any(axis=0), since=since)

    def add(self, tally: "RadioTally") -> None:
        """Add a :meth:`tally` to the counts (the older counts decayed by its rows)."""
        if not tally.rows:
            return
        self.silent = np.where(tally.heard, tally.since, self.silent + tally.since)
        for key, (m, weight, *sums) in tally.counts.items():
            if key not in self.counts:
                self._room()
                self.counts[key] = self._empty()
            c = self.counts[key]
            decay = 0.5 ** (m / self.half_life)
            c[0] = c[0] * decay + weight
            for i, x in enumerate(sums, start=1):
                c[i] = c[i] * decay + x
        self.seen += tally.rows

    def _room(self) -> None:
        devices = [k for k in self.counts if k != ALL]
        if len(devices) >= self.max_devices:
            del self.counts[min(devices, key=lambda k: self.counts[k][0])]

    # ------------------------------------------------------------------ deciding
    def view(self) -> RadioView:
        """The decision the counts support now (see the module); the gone set's hysteresis is kept."""
        n, heard, expected, _, _ = self.counts[ALL]
        if n < self.min_queries:
            return RadioView()
        gone = self._decide_gone(heard, expected)
        b = self.baseline
        new = np.flatnonzero(b.rssi & (heard >= max(self.min_new_rows, self.new_share * n))
                             & (expected < self.new_ratio * heard) & (b.rate <= self.new_max_rate))
        offsets = {}
        for key, (m, _, _, r, c) in self.counts.items():
            if key != ALL and m < self.min_queries:
                continue  # a device with few queries of its own: the traffic's offset
            off = self._offset(r, c, gone)
            if off is not None:
                offsets[key] = off if abs(off) >= self.deadband_db else 0.0
        return RadioView(gone=tuple(int(j) for j in gone), new=tuple(int(j) for j in new), offsets=offsets)

    def _decide_gone(self, heard: np.ndarray, expected: np.ndarray) -> list[int]:
        b = self.baseline
        judged = b.surveyed & (expected >= self.min_expected)
        ratio = np.where(judged, heard / np.maximum(expected, 1e-12), np.inf)
        was = np.zeros(len(ratio), dtype=bool)
        was[list(self._gone)] = True
        silent = b.surveyed & (self.silent >= self.silent_expected)
        # a gone transmitter comes back on evidence only: while traffic elsewhere expects it under min_expected
        # times it stays gone, so the decision does not flicker as the traffic moves
        gone = (judged & ((ratio < self.gone_ratio) | (was & (ratio < self.back_ratio)))) | (was & ~judged) | silent
        cap = int(np.floor(self.max_gone_share * b.surveyed.sum()))
        chosen = np.flatnonzero(gone)
        if len(chosen) > cap:  # the least heard first
            chosen = np.sort(chosen[np.argsort(np.where(silent, -1.0, ratio)[chosen], kind="stable")[:cap]])
        self._gone = set(int(j) for j in chosen)
        return sorted(self._gone)

    def _offset(self, resid: np.ndarray, count: np.ndarray, gone) -> float | None:
        b = self.baseline
        common = b.surveyed & (count >= self.min_heard)
        common[list(gone)] = False
        if common.sum() < self.min_transmitters:
            return None
        diff = resid[common] / count[common] - (0.0 if b.bias is None else b.bias[common])
        order = np.argsort(diff, kind="stable")
        w = np.cumsum(count[common][order])
        off = float(diff[order][int(np.searchsorted(w, w[-1] / 2))])
        return float(np.clip(off, -self.max_offset_db, self.max_offset_db))

    # ------------------------------------------------------------------ the stored form
    def state(self) -> dict:
        """The counts and the gone set as plain JSON values."""
        return {"seen": int(self.seen), "gone": sorted(self._gone), "silent": self.silent.round(3).tolist(),
                "counts": {k: [float(c[0])] + [x.round(4).tolist() for x in c[1:]] for k, c in self.counts.items()}}

    def restore(self, state: dict) -> "RadioWatch":
        """The counts of :meth:`state` (of a watch over the same features). Raises :class:`InputError` for a
        state of other features or of another form."""
        d = len(self.baseline.rssi)
        counts = {}
        for key, entry in state["counts"].items():
            if len(entry) != 5:
                raise InputError(f"the stored radio state has {len(entry)} figures per device; this version "
                                 "keeps 5", field="radio", expected="5 figures per device", received=str(len(entry)))
            arrays = [np.asarray(x, dtype=np.float64) for x in entry[1:]]
            if any(x.shape != (d,) for x in arrays):
                raise InputError(f"the stored radio state has {arrays[0].shape[0]} features; the model has {d}",
                                 field="radio", expected=f"{d} features", received=str(arrays[0].shape[0]))
            counts[str(key)] = [float(entry[0])] + arrays
        counts.setdefault(ALL, self._empty())
        self.counts, self.seen = counts, int(state.get("seen", 0))
        silent = np.asarray(state.get("silent", np.zeros(d)), dtype=np.float64)
        self.silent = silent if silent.shape == (d,) else np.zeros(d)
        self._gone = {int(j) for j in state.get("gone", ())}
        return self
