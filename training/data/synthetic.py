"""The embedded synthetic localisation data: needs no download.

:func:`make_survey` (the default data set of ``lmve-train``) has the structure of a real
fingerprint survey: reference points on a floor plan, several readings at each (different
devices with their own offsets, readings at different times), so rows repeat positions and the
guarantee that matters is for readings at positions not in the survey. :func:`make_localization`
draws independent rows at uniform positions.


A 40 m x 25 m floor with ``n_beacons`` BLE beacons. A device at a true position ``p`` reads
each beacon's RSSI through a log-distance path-loss model with log-normal shadowing
(``P0 - 10 k log10(dist) + N(0, shadow_db^2)``, floored at the receiver's sensitivity). The
label is the *surveyed* position ``y = p + e(p)``, whose error grows towards the walls and
whose orientation turns with the bearing from the floor's centre (a surveyor walking along
the corridors): the target noise changes in size and orientation with position, the case in
which learned local ellipses beat one global ellipse.
"""

from __future__ import annotations

import numpy as np

from models._validation import check_matrix
from models.exceptions import InputError

FLOOR = (40.0, 25.0)


def beacon_layout(n_beacons: int) -> np.ndarray:
    """Beacons spread on a jittered grid over the floor, (n_beacons, 2) metres; deterministic."""
    cols = int(np.ceil(np.sqrt(n_beacons * FLOOR[0] / FLOOR[1])))
    rows = int(np.ceil(n_beacons / cols))
    gx = (np.arange(cols) + 0.5) / cols * FLOOR[0]
    gy = (np.arange(rows) + 0.5) / rows * FLOOR[1]
    grid = np.array([(x, y) for y in gy for x in gx])[:n_beacons]
    jitter = np.random.default_rng(12345).uniform(-1.5, 1.5, size=grid.shape)
    return grid + jitter


def make_localization(n_samples: int = 2000, n_beacons: int = 16, shadow_db: float = 1.5,
                      seed: int = 0) -> tuple[np.ndarray, np.ndarray, list[str], list[str]]:
    """Generate ``(X, Y, feature_names, target_names)``.

    ``X`` (n_samples, n_beacons): RSSI in dBm, -100 when below sensitivity.
    ``Y`` (n_samples, 2): surveyed position in metres.
    """
    if n_samples < 1 or n_beacons < 1:
        raise InputError(f"n_samples and n_beacons must be positive; got {n_samples}, {n_beacons}")
    rng = np.random.default_rng(seed)
    P = rng.uniform([0.0, 0.0], FLOOR, size=(n_samples, 2))
    B = beacon_layout(n_beacons)
    dist = np.maximum(np.linalg.norm(P[:, None, :] - B[None], axis=2), 0.5)
    rssi = -45.0 - 10.0 * 2.2 * np.log10(dist) + rng.normal(0.0, shadow_db, size=dist.shape)
    X = np.maximum(rssi, -100.0)

    centre = np.array(FLOOR) / 2
    rel = (P - centre) / centre  # in [-1, 1]^2
    radius = np.clip(np.sqrt((rel**2).sum(1)), 0, 1.5)
    bearing = np.arctan2(rel[:, 1], rel[:, 0])
    major = 0.3 + 2.2 * radius**2  # metres: small in the middle, large near the walls
    minor = 0.25 + 0.2 * radius
    E = rng.normal(size=(n_samples, 2)) * np.stack([major, minor], axis=1)
    c, s = np.cos(bearing), np.sin(bearing)
    noise = np.stack([c * E[:, 0] - s * E[:, 1], s * E[:, 0] + c * E[:, 1]], axis=1)
    Y = P + noise
    return X, Y, [f"beacon_{i + 1:02d}" for i in range(n_beacons)], ["x_m", "y_m"]


def _rssi(P: np.ndarray, B: np.ndarray, rng, shadow_db: np.ndarray | float, offsets: np.ndarray | float = 0.0):
    dist = np.maximum(np.linalg.norm(P[:, None, :] - B[None], axis=2), 0.5)
    noise = rng.normal(0.0, 1.0, size=dist.shape) * np.reshape(shadow_db, (-1, 1))
    return np.maximum(-45.0 - 10.0 * 2.2 * np.log10(dist) + noise + np.reshape(offsets, (-1, 1)), -100.0)


def _shadowing(P: np.ndarray) -> np.ndarray:
    """dB of shadowing at positions ``P``: 1.5 in the middle of the floor, up to 5 near the walls."""
    rel = (P - np.array(FLOOR) / 2) / (np.array(FLOOR) / 2)
    return 1.5 + 3.5 * np.clip((rel**2).sum(1), 0.0, 1.0)


def make_survey(n_points: int = 100, readings: int = 20, n_beacons: int = 16, n_devices: int = 5,
                device_sd_db: float = 3.0, seed: int = 0):
    """A fingerprint survey: ``readings`` readings at each of ``n_points`` reference points.

    Reference points lie on a jittered grid over the floor; each reading is taken by one of
    ``n_devices`` devices (a constant offset in dB per device, sd ``device_sd_db``) at its own time
    (per-reading shadowing, stronger near the walls). The label of a reading is its reference
    point, exactly, as in a survey.

    Returns ``(X, Y, point_id, device_id, feature_names, target_names)``.
    """
    if n_points < 1 or readings < 1 or n_beacons < 1 or n_devices < 1:
        raise InputError(f"n_points, readings, n_beacons and n_devices must be positive; got {n_points}, "
                         f"{readings}, {n_beacons}, {n_devices}")
    rng = np.random.default_rng(seed)
    device_offset = np.random.default_rng([seed, 1]).normal(0.0, device_sd_db, size=n_devices)
    X, Y, point_id, device_id = _readings(_survey_points(n_points, rng), readings, n_beacons, device_offset, rng)
    return X, Y, point_id, device_id, [f"beacon_{i + 1:02d}" for i in range(n_beacons)], ["x_m", "y_m"]


def make_new_positions(n_points: int = 100, readings: int = 20, n_beacons: int = 16, n_devices: int = 5,
                       device_sd_db: float = 3.0, survey_seed: int = 0, seed: int = 1, where: str = "floor"):
    """Readings at ``n_points`` positions the survey :func:`make_survey` ``(..., seed=survey_seed)`` did not
    visit, ``readings`` at each, read by the survey's devices through its beacons: what the guarantee "at a
    position not in the survey" is about. ``where="floor"``: positions uniform over the whole floor (where a
    user may stand, corners beyond the outermost surveyed points included); ``"grid"``: a fresh jitter of the
    survey's own grid (one position per cell, as the survey draws them, so each lies near a surveyed one).
    Returns ``(X, Y, point_id, device_id)``."""
    if n_points < 1 or readings < 1 or n_beacons < 1 or n_devices < 1:
        raise InputError(f"n_points, readings, n_beacons and n_devices must be positive; got {n_points}, "
                         f"{readings}, {n_beacons}, {n_devices}")
    if where not in ("floor", "grid"):
        raise InputError(f"where must be 'floor' or 'grid'; got {where!r}", field="where", expected="floor | grid",
                         received=repr(where))
    device_offset = np.random.default_rng([survey_seed, 1]).normal(0.0, device_sd_db, size=n_devices)
    rng = np.random.default_rng([survey_seed, seed, 97])
    points = _survey_points(n_points, rng) if where == "grid" else rng.uniform([0.0, 0.0], FLOOR, size=(n_points, 2))
    return _readings(points, readings, n_beacons, device_offset, rng)


def survey_at(points, readings: int = 20, n_beacons: int = 16, n_devices: int = 5, device_sd_db: float = 3.0,
              survey_seed: int = 0, seed: int = 1):
    """Readings at the given ``points`` (m, 2) metres of the floor, ``readings`` at each, read by the devices of
    :func:`make_survey` ``(..., seed=survey_seed)`` through its beacons: a walk to positions someone chose (a survey
    plan's). Returns ``(X, Y, point_id, device_id)``."""
    P = check_matrix(points, "points", n_columns=2, describe="metres on the floor")
    if readings < 1 or n_beacons < 1 or n_devices < 1:
        raise InputError(f"readings, n_beacons and n_devices must be positive; got {readings}, {n_beacons}, "
                         f"{n_devices}")
    device_offset = np.random.default_rng([survey_seed, 1]).normal(0.0, device_sd_db, size=n_devices)
    return _readings(P, readings, n_beacons, device_offset, np.random.default_rng([survey_seed, seed, 98]))


def _survey_points(n_points: int, rng) -> np.ndarray:
    """(n_points, 2) reference points: one in the middle 60 % of each cell of a grid over the floor."""
    cols = int(np.ceil(np.sqrt(n_points * FLOOR[0] / FLOOR[1])))
    rows = int(np.ceil(n_points / cols))
    grid = np.array([((i + 0.5) / cols * FLOOR[0], (j + 0.5) / rows * FLOOR[1]) for j in range(rows)
                     for i in range(cols)])[:n_points]
    return grid + rng.uniform(-0.3, 0.3, size=grid.shape) * (np.array(FLOOR) / [cols, rows])


def _readings(points: np.ndarray, readings: int, n_beacons: int, device_offset: np.ndarray, rng):
    """``readings`` readings at each of ``points``, each by a random device: ``(X, Y, point_id, device_id)``."""
    point_id = np.repeat(np.arange(len(points)), readings)
    device_id = rng.integers(0, len(device_offset), size=point_id.size)
    Y = points[point_id]
    X = _rssi(Y, beacon_layout(n_beacons), rng, _shadowing(Y), device_offset[device_id])
    return X, np.round(Y, 2), point_id, device_id


def make_floor_survey(n_points: int = 60, readings: int = 10, n_floors: int = 3, beacons_per_floor: int = 8,
                      floor_height_m: float = 4.0, floor_loss_db: float = 4.0, crowded: float = 0.25, seed: int = 0):
    """A survey of a building of ``n_floors`` floors: ``readings`` readings at each of ``n_points`` reference
    points per floor, every floor with ``beacons_per_floor`` beacons (the same plan).

    A beacon's reading loses ``floor_loss_db`` per floor between it and the reader, on top of the 3-D path
    loss, so the floor is told by which beacons are strong. A share ``crowded`` of the readings are taken
    in a crowd (three times the shadowing): their floor and their position are both less certain, the
    case in which one joint score beats a union bound. The label of a reading is its reference point and
    its floor.

    Returns ``(X, Y, floor, point_id, feature_names, target_names)`` (``point_id`` unique over floors).
    """
    if min(n_points, readings, n_floors, beacons_per_floor) < 1:
        raise InputError(f"n_points, readings, n_floors and beacons_per_floor must be positive; got {n_points}, "
                         f"{readings}, {n_floors}, {beacons_per_floor}")
    rng = np.random.default_rng([seed, 40])
    cols = int(np.ceil(np.sqrt(n_points * FLOOR[0] / FLOOR[1])))
    rows = int(np.ceil(n_points / cols))
    grid = np.array([((i + 0.5) / cols * FLOOR[0], (j + 0.5) / rows * FLOOR[1]) for j in range(rows)
                     for i in range(cols)])[:n_points]
    points = np.concatenate([grid + rng.uniform(-0.3, 0.3, size=grid.shape) * (np.array(FLOOR) / [cols, rows])
                             for _ in range(n_floors)])
    point_floor = np.repeat(np.arange(n_floors), n_points)
    point_id = np.repeat(np.arange(n_floors * n_points), readings)
    Y, floor = points[point_id], point_floor[point_id]
    B = beacon_layout(beacons_per_floor)
    flat = np.linalg.norm(Y[:, None, :] - B[None], axis=2)  # (m, beacons) in the plane
    between = np.abs(floor[:, None, None] - np.arange(n_floors)[None, None, :])  # (m, 1, floors)
    dist = np.maximum(np.sqrt(flat[:, :, None] ** 2 + (between * floor_height_m) ** 2), 0.5)
    shadow = _shadowing(Y) * np.where(rng.random(len(Y)) < crowded, 3.0, 1.0)
    noise = rng.normal(size=dist.shape) * shadow[:, None, None]
    rssi = -45.0 - 22.0 * np.log10(dist) - floor_loss_db * between + noise
    X = np.maximum(rssi, -100.0).transpose(0, 2, 1).reshape(len(Y), n_floors * beacons_per_floor)
    names = [f"f{f}_beacon_{i + 1:02d}" for f in range(n_floors) for i in range(beacons_per_floor)]
    return X, np.round(Y, 2), floor, point_id, names, ["x_m", "y_m"]


def make_queries(n: int, n_beacons: int = 16, n_devices: int = 5, device_sd_db: float = 3.0, seed: int = 1,
                 survey_seed: int = 0):
    """Readings at ``n`` uniform positions of the floor (between a survey's reference points), with
    the devices of :func:`make_survey` ``(survey_seed)``. Returns ``(X, Y)``."""
    device_offset = np.random.default_rng([survey_seed, 1]).normal(0.0, device_sd_db, size=n_devices)
    rng = np.random.default_rng(seed)
    Y = rng.uniform([0.0, 0.0], FLOOR, size=(n, 2))
    X = _rssi(Y, beacon_layout(n_beacons), rng, _shadowing(Y), device_offset[rng.integers(0, n_devices, size=n)])
    return X, Y


def make_visits(n_subjects: int = 35, min_visits: int = 4, max_visits: int = 12, seed: int = 0,
                extra_features: int = 0, heterogeneity: float = 0.5):
    """A follow-up study with few groups: ``n_subjects`` subjects, each seen at ``min_visits`` to
    ``max_visits`` visits (uniform), two measurements per visit.

    Six features describe the subject (constant over its visits but for a little measurement noise)
    and one the visit (months since the first). Each target is a smooth function of them plus a
    subject effect (its own size per subject: the subjects' errors are correlated over visits, which
    is why a new subject needs grouped calibration; its spread ``1 + heterogeneity * |z|``, ``z`` a standard
    normal of the subject: 0 makes the subjects alike) plus visit noise whose spread grows with time and
    whose correlation between the two measurements changes sign with the subject's fifth feature.
    ``extra_features`` more columns (``panel_1`` ...) are visit measurements that carry nothing about
    the targets: each subject's own level plus visit noise (drawn after everything else, so the other
    columns do not depend on how many).

    Returns ``(X, Y, subject_id, feature_names, target_names)``.
    """
    if n_subjects < 1 or not 1 <= min_visits <= max_visits or extra_features < 0 or not heterogeneity >= 0:
        raise InputError(f"need n_subjects >= 1, 1 <= min_visits <= max_visits, extra_features >= 0 and "
                         f"heterogeneity >= 0; got {n_subjects}, {min_visits}, {max_visits}, {extra_features}, "
                         f"{heterogeneity}")
    rng = np.random.default_rng([seed, 36])
    Z = rng.normal(size=(n_subjects, 6))
    visits = rng.integers(min_visits, max_visits + 1, size=n_subjects)
    subject = np.repeat(np.arange(n_subjects), visits)
    months = np.concatenate([np.sort(rng.uniform(0.0, 24.0, size=v)) for v in visits])
    months -= np.repeat([months[np.sum(visits[:s])] for s in range(n_subjects)], visits)
    spread = 1.0 + heterogeneity * np.abs(Z[:, 3])
    effect = rng.normal(size=(n_subjects, 2)) * spread[:, None] * [1.0, 0.6]
    z = Z[subject]
    t = months / 12.0
    mean = np.stack([2.0 * z[:, 0] + z[:, 1] + 0.5 * t, z[:, 2] - z[:, 0] + 0.3 * t * z[:, 1]], axis=1)
    rho = np.where(z[:, 4] > 0, 0.8, -0.8)
    e1 = rng.normal(size=len(subject))
    e2 = rho * e1 + np.sqrt(1 - rho**2) * rng.normal(size=len(subject))
    noise = 0.5 * np.sqrt(1.0 + t)[:, None] * np.stack([e1, e2], axis=1)
    Y = mean + effect[subject] + noise
    X = np.column_stack([z + rng.normal(0.0, 0.05, size=z.shape), months])
    names = [f"baseline_{i + 1}" for i in range(6)] + ["months"]
    if extra_features:
        level = rng.normal(size=(n_subjects, extra_features))
        X = np.column_stack([X, level[subject] + 0.5 * rng.normal(size=(len(subject), extra_features))])
        names += [f"panel_{i + 1}" for i in range(extra_features)]
    return X, Y, subject, names, ["measure_a", "measure_b"]


def oracle_covariance(X: np.ndarray) -> np.ndarray:
    """The true conditional covariance ``Sigma(x)`` (m, 2, 2) of :func:`make_oracle`'s targets.

    ``Sigma = Q(theta) diag(a^2, b^2) Q(theta)^T`` with the major axis ``a = 0.15 + 0.6 u1^2``
    (``u = (x + 1) / 2``), the minor ``b = 0.1 + 0.15 u2`` and the angle ``theta = pi (x1 + x2) / 2``:
    the spread changes sixfold in size and its orientation turns half a circle over the cube.
    """
    u = (np.asarray(X, float)[:, :2] + 1.0) / 2.0
    a = 0.15 + 0.6 * u[:, 0] ** 2
    b = 0.1 + 0.15 * u[:, 1]
    theta = np.pi * (X[:, 0] + X[:, 1]) / 2.0
    c, s = np.cos(theta), np.sin(theta)
    Q = np.stack([np.stack([c, -s], -1), np.stack([s, c], -1)], -2)  # (m, 2, 2) rotations
    return Q @ (np.stack([a**2, b**2], -1)[:, :, None] * np.transpose(Q, (0, 2, 1)))


def oracle_mean(X: np.ndarray) -> np.ndarray:
    """The true conditional mean (m, 2) of :func:`make_oracle`'s targets: smooth, of scale 1."""
    x1, x2, x3 = X[:, 0], X[:, 1], X[:, 2]
    return np.stack([np.sin(np.pi * x1) + 0.5 * x2 * x3, np.cos(np.pi * x2 / 2) + 0.5 * x1 - 0.3 * x3], axis=1)


def make_oracle(n_samples: int = 2000, n_features: int = 6, seed: int = 0):
    """A smooth regression task whose smallest regions are known: how close a learned shape gets to the optimum.

    ``X`` is uniform on ``[-1, 1]^n_features`` (the last ``n_features - 3`` carry nothing), ``Y = f(x) + e``
    with ``e ~ N(0, Sigma(x))`` (:func:`oracle_mean`, :func:`oracle_covariance`): heteroscedastic, its
    orientation turning with ``x``. Given ``x`` the smallest region holding ``Y`` with probability ``eta`` is the
    ellipse ``{y : (y - f)^T Sigma^{-1} (y - f) <= chi2_2(eta)}``, of volume (paper convention, without pi)
    ``chi2_2(eta) det(Sigma)^{1/2}``.

    Parameters
    ----------
    n_samples : int, default=2000
        Rows.
    n_features : int, default=6
        Features, at least 3.
    seed : int, default=0
        Seeds the draw.

    Returns
    -------
    X : ndarray of shape (n_samples, n_features)
    Y : ndarray of shape (n_samples, 2)
    sqrt_det_cov : ndarray of shape (n_samples,)
        ``det(Sigma(x))^{1/2}``.
    feature_names : list of str
    target_names : list of str

    Raises
    ------
    InputError
        ``n_samples < 1`` or ``n_features < 3``.
    """
    if n_samples < 1 or n_features < 3:
        raise InputError(f"n_samples must be positive and n_features at least 3; got {n_samples}, {n_features}")
    rng = np.random.default_rng([seed, 43])
    X = rng.uniform(-1.0, 1.0, size=(n_samples, n_features))
    S = oracle_covariance(X)
    L = np.linalg.cholesky(S)
    Y = oracle_mean(X) + (L @ rng.normal(size=(n_samples, 2, 1)))[:, :, 0]
    sqrt_det = np.sqrt(np.linalg.det(S))
    return X, Y, sqrt_det, [f"x{i + 1}" for i in range(n_features)], ["y1", "y2"]
