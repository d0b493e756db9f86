"""What the state holds and how it is read and written, in SQL both backends run.

:class:`ServiceState` writes every statement once, with ``?`` placeholders and only syntax SQLite and
PostgreSQL share (``INSERT ... ON CONFLICT ... DO UPDATE``, ``RETURNING``); a backend supplies the
connection, the transaction and the placeholder style (:class:`~service.state.sqlite.SQLiteState`,
:class:`~service.state.postgres.PostgresState`). A database the backend cannot reach raises
:class:`StateUnavailable`, which the routes answer with 503 and its reason.
"""

from __future__ import annotations

import json
import time
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Callable, Iterator

import numpy as np

COUNTERS = ("rows", "inside", "p_value_sum", "inside_served")
#: :meth:`ServiceState.publish`'s ``expect`` default: publish whatever is published now
ANY = object()


class PublishConflict(RuntimeError):
    """A compare-and-set publish lost: ``model``'s published bundle is no longer ``expected`` (another
    request, maybe on another process, published ``published`` first). Nothing was published."""

    def __init__(self, model: str, expected: str | None, published: str | None):
        super().__init__(f"model {model!r}: bundle {published} is published, not {expected}")
        self.model, self.expected, self.published = model, expected, published


class StateUnavailable(RuntimeError):
    """The state's database cannot be read or written now (unreachable, locked, read-only); ``reason`` says
    why. Nothing of the operation was stored, unless ``outcome_unknown``: the server went away while a
    transaction committed, so it may have been (the client cannot tell before the server is back)."""

    def __init__(self, reason: str, outcome_unknown: bool = False):
        super().__init__(reason)
        self.reason, self.outcome_unknown = reason, outcome_unknown


@dataclass(frozen=True)
class Served:
    """A model's published record: the bundle every worker serves, or ``loaded`` false (unloaded)."""

    path: str | None
    bundle_id: str | None
    configured: str | None
    generation: int
    loaded: bool = True


@dataclass(frozen=True)
class MethodFeedback:
    """One method's verdict on a batch of labelled rows."""

    inside: np.ndarray         # (k,) bool: inside the region at the bundle's level
    p_value: np.ndarray        # (k,)
    scores: np.ndarray         # (k,) conformity scores (for the adaptive update)


@dataclass(frozen=True)
class ShiftRecord:
    """A model's shift test for one bundle, as last stepped (:meth:`ServiceState.step_shift`)."""

    bundle_id: str
    evidence: float
    queries: int
    alarm_at: int | None
    delta: float
    started_at: float
    at: float


@dataclass(frozen=True)
class RadioRecord:
    """A model's radio watch, as last stepped (:meth:`ServiceState.step_radio`): the view it decided (a
    :meth:`models.radio.RadioView.to_dict`), the rows it counted, when it started and was last stepped."""

    view: dict
    seen: int
    started_at: float
    at: float


#: ``(stored watch state or None) -> (new watch state, its view)``, both json-able dicts
RadioStep = Callable[["dict | None"], "tuple[dict, dict]"]

#: ``(stored test state or None) -> new test state`` (a json-able dict with ``evidence``, ``queries``,
#: ``alarm_at`` and ``delta`` beside the test's own arrays)
ShiftStep = Callable[["dict | None"], dict]


@dataclass(frozen=True)
class WindowStats:
    rows: int
    coverage: float | None        # inside at the bundle's level, over the window
    p_value_mean: float | None
    served_coverage: float | None  # inside the region actually served (the adaptive level when on)


#: ``(method, stored (value, scale) or None, scores (k,)) -> (new (value, scale), levels served (k,), inside served (k,))``
AdaptStep = Callable[[str, "tuple | None", np.ndarray], "tuple[tuple, np.ndarray, np.ndarray]"]


def _float(v) -> float | None:
    return None if v is None else float(v)


class Tx:
    """One transaction's statements, written with ``?`` placeholders whatever the driver's style."""

    def __init__(self, cursor, qmark: bool):
        self._cur, self._qmark = cursor, qmark

    def _sql(self, sql: str) -> str:
        return sql if self._qmark else sql.replace("?", "%s")

    def execute(self, sql: str, args=()):
        self._cur.execute(self._sql(sql), args)
        return self._cur

    def executemany(self, sql: str, rows) -> None:
        self._cur.executemany(self._sql(sql), rows)


class ServiceState:
    """The state's operations; a backend implements :meth:`_transaction`, :meth:`health` and :meth:`close`."""

    #: ``"sqlite"`` or ``"postgresql"``
    dialect: str = ""
    #: whether other processes see this state (a file or a server, not memory)
    shared: bool = False

    def __init__(self, keep: int = 10_000):
        self.keep = keep

    # ------------------------------------------------------------------ the backend's part
    @contextmanager
    def _transaction(self) -> Iterator[Tx]:  # pragma: no cover - abstract
        """One read-write transaction that serialises with every other writer of the same rows."""
        raise NotImplementedError
        yield

    def _read(self, sql: str, args=()) -> list[tuple]:
        with self._transaction() as tx:
            return tx.execute(sql, args).fetchall()

    def health(self) -> str | None:
        """``None`` when the database answers now, else why not."""
        try:
            self._read("SELECT 1")
        except StateUnavailable as exc:
            return exc.reason
        return None

    def on_change(self, callback: Callable[[], None]) -> None:
        """Call ``callback`` (from any thread) when another process publishes; a backend without
        notifications never calls it (the followers poll)."""

    def close(self) -> None:  # pragma: no cover - abstract
        raise NotImplementedError

    def describe(self) -> str:
        """Where the state lives, without secrets (for logs and /readyz)."""
        return self.dialect

    # ------------------------------------------------------------------ the served bundles
    def _notify(self, tx: Tx, model: str) -> None:
        """Tell the other processes that ``model``'s record or adaptive state changed, inside the writing
        transaction (delivered at its commit)."""

    def publish(self, model: str, path=None, bundle_id: str | None = None, configured=None,
                loaded: bool = True, expect: str | None = ANY) -> int:
        """Record ``path`` (id ``bundle_id``) as the bundle every worker serves for ``model``, or
        (``loaded`` false) that ``model`` is unloaded; the model's new generation. The model's shift test
        ends with it (the next query starts a new one).

        With ``expect`` (a bundle id), a compare-and-set: it publishes only while ``expect`` is the
        published (and loaded) bundle, or no record exists yet, in one statement (the upsert's ``WHERE``,
        evaluated on the row locked by the conflict); otherwise raises :class:`PublishConflict` naming
        the bundle that won."""
        cas = expect is not ANY
        with self._transaction() as tx:
            row = tx.execute(
                "INSERT INTO model_served (model, path, bundle_id, configured, loaded, generation, at) "
                "VALUES (?, ?, ?, ?, ?, 1, ?) ON CONFLICT (model) DO UPDATE SET path = excluded.path, "
                "bundle_id = excluded.bundle_id, configured = excluded.configured, loaded = excluded.loaded, "
                "generation = model_served.generation + 1, at = excluded.at"
                + (" WHERE model_served.bundle_id = ? AND model_served.loaded = 1" if cas else "")
                + " RETURNING generation",
                (model, None if path is None else str(path), bundle_id, None if configured is None else str(configured),
                 int(loaded), time.time()) + ((expect,) if cas else ())).fetchone()
            if row is None:
                (published,) = tx.execute("SELECT bundle_id FROM model_served WHERE model = ?", (model,)).fetchone()
                raise PublishConflict(model, expect, published)
            tx.execute("DELETE FROM model_shift WHERE model = ?", (model,))  # a new bundle or reload: a new test
            self._notify(tx, model)
        return int(row[0])

    def served(self, model: str) -> Served | None:
        rows = self._read("SELECT path, bundle_id, configured, generation, loaded FROM model_served WHERE model = ?",
                          (model,))
        return Served(*rows[0][:4], bool(rows[0][4])) if rows else None

    def served_all(self) -> dict[str, Served]:
        """Every model's published record."""
        return {r[0]: Served(*r[1:5], bool(r[5])) for r in
                self._read("SELECT model, path, bundle_id, configured, generation, loaded FROM model_served")}

    def claim_legacy(self, model: str, configured) -> bool:
        """Move a state from before the model repository to ``model``; only SQLite files had one."""
        return False

    # ------------------------------------------------------------------ feedback
    def record_feedback(self, model: str, bundle_id: str, batch: dict[str, MethodFeedback], *,
                        site: str | None = None, device: str | None = None, adapt: AdaptStep | None = None,
                        target: float = 0.9, points=None) -> dict[str, np.ndarray]:
        """Store a batch of labelled rows' verdicts for every method of ``model`` (with ``points`` (k, n), the
        true positions), update the counters and (with ``adapt``) the adaptive state, in one transaction.
        Returns ``method -> inside served (k,)``.

        Each method's ``rows`` counter is updated first: its row lock (PostgreSQL) or the write lock
        (SQLite) makes every other batch of the same model and method wait until this one commits, so
        that the adaptive state is read, stepped and written by one batch at a time."""
        now = time.time()
        k_rows = int(next(iter(batch.values())).inside.shape[0]) if batch else 0
        texts = [None] * k_rows if points is None else [json.dumps(p) for p in np.asarray(points, float).tolist()]
        served_inside = {}
        upsert = ("INSERT INTO model_counters (model, method, name, value) VALUES (?, ?, ?, ?) "
                  "ON CONFLICT (model, method, name) DO UPDATE SET value = model_counters.value + excluded.value")
        with self._transaction() as tx:
            for method in sorted(batch):  # one lock order for every writer
                fb = batch[method]
                k = int(fb.inside.shape[0])
                key = (model, bundle_id, method)
                tx.execute(upsert, (model, method, "rows", k))
                if adapt is not None:
                    row = tx.execute("SELECT alpha, scale FROM model_adaptive WHERE model = ? AND bundle_id = ? "
                                     "AND method = ?", key).fetchone()
                    (value, scale), levels, inside_served = adapt(method, None if row is None else tuple(row), fb.scores)
                    tx.execute("INSERT INTO model_adaptive (model, bundle_id, method, alpha, scale, n, at) "
                               "VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT (model, bundle_id, method) DO UPDATE SET "
                               "alpha = excluded.alpha, scale = excluded.scale, n = model_adaptive.n + excluded.n, "
                               "at = excluded.at",
                               (*key, float(value), None if scale is None else float(scale), k, now))
                else:
                    levels, inside_served = np.full(k, target), fb.inside
                tx.executemany(
                    "INSERT INTO feedback (at, model, bundle_id, method, inside, p_value, level, inside_served, site, "
                    "device, point) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    [(now, model, bundle_id, method, int(i), float(p), float(lv), int(s), site, device, pt)
                     for i, p, lv, s, pt in zip(fb.inside, fb.p_value, levels, inside_served, texts)])
                for name, value in (("inside", int(np.sum(fb.inside))), ("p_value_sum", float(np.sum(fb.p_value))),
                                    ("inside_served", int(np.sum(inside_served)))):
                    tx.execute(upsert, (model, method, name, value))
                tx.execute("DELETE FROM feedback WHERE model = ? AND bundle_id = ? AND method = ? AND id <= "
                           "(SELECT id FROM feedback WHERE model = ? AND bundle_id = ? AND method = ? ORDER BY id DESC "
                           "LIMIT 1 OFFSET ?)", (*key, *key, self.keep))
                served_inside[method] = np.asarray(inside_served, dtype=bool)
            if adapt is not None:  # the other processes serve the new adaptive level at once
                self._notify(tx, model)
        return {m: served_inside[m] for m in batch}

    def window(self, model: str, bundle_id: str, size: int) -> dict[str, WindowStats]:
        """Observed coverage over the last ``size`` labelled rows of ``model``'s bundle ``bundle_id``, per method."""
        rows = self._read(
            "SELECT method, COUNT(*), AVG(inside), AVG(p_value), AVG(inside_served) FROM (SELECT method, inside, "
            "p_value, inside_served, ROW_NUMBER() OVER (PARTITION BY method ORDER BY id DESC) AS r FROM feedback "
            "WHERE model = ? AND bundle_id = ?) AS last WHERE r <= ? GROUP BY method", (model, bundle_id, size))
        return {method: WindowStats(int(n), _float(cov), _float(p), _float(served))
                for method, n, cov, p, served in rows}

    def recent(self, model: str, method: str, limit: int) -> list[dict]:
        """The last ``limit`` labelled rows of ``model`` scored by ``method`` (any bundle), newest first: when,
        the bundle, the point (None for rows stored before points were), inside at the bundle's level and
        inside the region served."""
        rows = self._read("SELECT at, bundle_id, point, inside, inside_served, level, site, device FROM feedback "
                          "WHERE model = ? AND method = ? ORDER BY id DESC LIMIT ?", (model, method, int(limit)))
        return [{"at": at, "bundle_id": b, "point": None if pt is None else json.loads(pt), "inside": bool(i),
                 "inside_served": bool(s), "level": lv, "site": site, "device": device}
                for at, b, pt, i, s, lv, site, device in rows]

    def counters(self) -> dict[str, dict[str, dict[str, float]]]:
        """``model -> method -> {rows, inside, p_value_sum, inside_served}``: running totals of every worker."""
        out: dict[str, dict[str, dict[str, float]]] = {}
        for model, method, name, value in self._read("SELECT model, method, name, value FROM model_counters"):
            out.setdefault(model, {}).setdefault(method, dict.fromkeys(COUNTERS, 0.0))[name] = value
        return out

    def adaptive_state(self, model: str, bundle_id: str) -> dict[str, tuple]:
        """The online rule's ``(value, scale)`` per method of ``model``'s bundle ``bundle_id`` (none before the
        first feedback)."""
        return {m: (a, sc) for m, a, sc in self._read("SELECT method, alpha, scale FROM model_adaptive WHERE model = ? "
                                                     "AND bundle_id = ?", (model, bundle_id))}

    # ------------------------------------------------------------------ the shift test
    def step_shift(self, model: str, bundle_id: str, step: ShiftStep, delta: float) -> ShiftRecord:
        """Step ``model``'s shift test of bundle ``bundle_id`` in one transaction: ``step(stored)`` gets the
        stored state (``None``: a new test, started now at level ``delta``) and returns the new one, which
        is written back. The row is upserted first: its row lock (PostgreSQL) or the write lock (SQLite)
        makes every other worker's step of the same test wait until this one commits."""
        now = time.time()
        key = (model, bundle_id)
        with self._transaction() as tx:
            tx.execute("INSERT INTO model_shift (model, bundle_id, state, evidence, queries, alarm_at, delta, "
                       "started_at, at) VALUES (?, ?, NULL, 1.0, 0, NULL, ?, ?, ?) ON CONFLICT (model, bundle_id) "
                       "DO UPDATE SET at = excluded.at", (*key, float(delta), now, now))
            text, started = tx.execute("SELECT state, started_at FROM model_shift WHERE model = ? AND bundle_id = ?",
                                       key).fetchone()
            new = step(None if text is None else json.loads(text))
            alarm_at = None if new["alarm_at"] is None else int(new["alarm_at"])
            tx.execute("UPDATE model_shift SET state = ?, evidence = ?, queries = ?, alarm_at = ?, delta = ?, at = ? "
                       "WHERE model = ? AND bundle_id = ?", (json.dumps(new), float(new["evidence"]),
                                                             int(new["queries"]), alarm_at, float(new["delta"]), now,
                                                             *key))
        return ShiftRecord(bundle_id, float(new["evidence"]), int(new["queries"]), alarm_at, float(new["delta"]),
                           float(started), now)

    def shifts(self, model: str | None = None) -> dict[tuple[str, str], ShiftRecord]:
        """``(model, bundle_id) -> ShiftRecord`` of every stored shift test (of ``model`` alone when given)."""
        sql = "SELECT model, bundle_id, evidence, queries, alarm_at, delta, started_at, at FROM model_shift"
        rows = self._read(sql + " WHERE model = ?", (model,)) if model is not None else self._read(sql)
        return {(m, b): ShiftRecord(b, float(e), int(q), None if a is None else int(a), float(d), float(st), float(at))
                for m, b, e, q, a, d, st, at in rows}

    # ------------------------------------------------------------------ the radio watch
    def step_radio(self, model: str, step: RadioStep) -> RadioRecord:
        """Step ``model``'s radio watch in one transaction: ``step(stored)`` gets the stored watch (``None``: a new
        one, started now) and returns the new watch and its view, written back. The row is upserted first, so
        that every other worker's step of the same watch waits until this one commits (as :meth:`step_shift`)."""
        now = time.time()
        with self._transaction() as tx:
            tx.execute("INSERT INTO model_radio (model, state, view, seen, started_at, at) VALUES (?, NULL, NULL, 0, "
                       "?, ?) ON CONFLICT (model) DO UPDATE SET at = excluded.at", (model, now, now))
            text, started = tx.execute("SELECT state, started_at FROM model_radio WHERE model = ?",
                                       (model,)).fetchone()
            watch, view = step(None if text is None else json.loads(text))
            seen = int(watch.get("seen", 0))
            tx.execute("UPDATE model_radio SET state = ?, view = ?, seen = ?, at = ? WHERE model = ?",
                       (json.dumps(watch), json.dumps(view), seen, now, model))
        return RadioRecord(view, seen, float(started), now)

    def radio(self, model: str) -> RadioRecord | None:
        """``model``'s radio watch as last stepped; ``None`` before its first step (or after a reset)."""
        rows = self._read("SELECT view, seen, started_at, at FROM model_radio WHERE model = ?", (model,))
        if not rows or rows[0][0] is None:
            return None
        view, seen, started, at = rows[0]
        return RadioRecord(json.loads(view), int(seen), float(started), float(at))

    def reset_radio(self, model: str) -> bool:
        """Forget ``model``'s radio watch (the survey's radio again, for every worker at its next step); whether
        there was one."""
        with self._transaction() as tx:
            return tx.execute("DELETE FROM model_radio WHERE model = ? RETURNING model", (model,)).fetchone() is not None
