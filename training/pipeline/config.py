"""What :func:`training.pipeline.train` fits, as one object: :class:`TrainConfig`, and the checks of a
configuration that need no data (:func:`check_config`), run before anything is fitted."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from models import registry
from models.centres.kinds import CANDIDATES
from models._validation import lookup
from models.exceptions import InputError
from training.pipeline.centre_selection import CRITERIA, MIN_SCREEN_ROWS
from training.pipeline.served_volume import check_folds, check_primary, check_tolerance

#: every shape method, in the registry's order
METHODS = tuple(registry.METHODS)
#: the methods the service falls back to (NLE, then GE): fitted whatever ``methods`` names, unless
#: ``TrainConfig.fallbacks`` is off
FALLBACKS = ("ge", "nle")
#: whom the guarantee is for (TrainConfig.calibrate_for)
CALIBRATE_FOR = ("survey", "site")


@dataclass
class TrainConfig:
    """What to fit: the level, the split seed, the methods (registry names) and their parameters
    (``method_params[name]``), and the centre (a registry name, with ``centre_params`` overrides)."""

    coverage: float = 0.9
    """The level ``eta`` every method is calibrated at, in (0, 1)."""
    seed: int = 0
    """Seeds the split, the folds and every fit."""
    methods: tuple[str, ...] = METHODS
    """The shape methods to fit, by registry name (:data:`models.registry.METHODS`); with ``fallbacks``, GE and NLE
    are fitted too (:meth:`resolved_methods`)."""
    fallbacks: bool = True
    """Fit the service's fallbacks (:data:`FALLBACKS`, first) whatever ``methods`` names; False: exactly
    ``methods`` (an experiment on one shape)."""
    device: str = "auto"
    """Where the networks train: "auto" (a GPU when torch sees one), "cpu" or "cuda"."""
    method_params: dict = field(default_factory=dict)
    """Hyperparameters by method name, passed to the shape's ``__init__``."""
    centre: str = "paper"
    """The centre kind (:data:`models.registry.CENTRES`), or "auto": the candidate of smallest out-of-fold error."""
    centre_params: dict = field(default_factory=dict)
    """Hyperparameters of the configured centre."""
    progress: bool = False
    """Show progress bars."""
    cross_fit: int | None = None
    """0: shapes learn from the centre's own training residuals (the paper); k >= 2: from k-fold out-of-fold
    residuals (the served centre is still the one fitted on all training rows); None: 5 with centre="auto" (the
    selection's folds: no extra fit) or when the dataset has groups (group folds), else 0."""
    calibration: str | None = None
    """The calibration rule (models.calibration.conformal.RULES); None: "rows", or "group-subsample" with groups."""
    calibration_mode: str = "auto"
    """How a grouped survey's calibration scores are drawn (training.calibration.cross_fit.MODES): "split" (held-out
    positions, exact), "cross-fit" (every training position scored out of fold, approximate) or "auto" (cross-fit
    below training.calibration.cross_fit.CROSS_FIT_BELOW calibration groups)."""
    use_groups: bool = True
    """Whether the split and calibration use the dataset's groups, or for a dataset without groups whose rows are
    a survey (most repeat their exact position: models.calibration.grouping) each position as a group; False: the
    paper's row protocol."""
    crs: object = "dataset"
    """The targets' CRS: a models.geo.TargetCRS, None for none, a CRS name ("EPSG:32630"; "none": none even where
    the dataset declares one), or "dataset": the one the dataset declares (``Dataset.crs``; none when it declares
    none). Resolved once, in the plan (:meth:`target_crs`)."""
    crs_axes: str | None = None
    """The CRS's axis order ("xy" or "yx"), overriding the dataset's; None: the dataset's or "xy"."""
    crs_scale: float | None = None
    """CRS units per target unit, overriding the dataset's; None: the dataset's or 1."""
    rssi: str = "off"
    """``"auto"``: map the "not detected" codes of RSSI columns to a floor (models.preprocessing); "off": no step."""
    not_detected: float | None = None
    """The RSSI "not detected" code; None: found in the data (values outside -120..0 dBm)."""
    rssi_floor: float | None = None
    """What "not detected" becomes; None: below the weakest real reading."""
    rssi_representation: str = "auto"
    """How the RSSI step re-expresses the readings (models.preprocessing.REPRESENTATIONS), or "auto": "dbm" (the
    fingerprint centre chooses its own representation from the readings, across units too)."""
    centre_candidates: tuple[str, ...] = CANDIDATES
    """What centre="auto" chooses from; by default the kinds registered as candidates (models.centres.kinds.CANDIDATES:
    paper, scaled, knn, fingerprint, hgb, gp). Not among them by default: "mlp" (six network fits per selection, the
    slowest candidate by far) and "stack" (the blend of the others, weighted on their out-of-fold centres, no fit
    of its own); ask for them with a candidates list."""
    centre_criterion: str = "rmse"
    """What centre="auto" minimises over the candidates' out-of-fold Euclidean errors: "rmse", or "quantile", the
    error at the coverage level (the distance a region must reach)."""
    centre_screen_rows: int | None = 5000
    """With centre="auto", a train part above this many rows screens the candidates on this many rows of one
    fold, then races the survivors fold by fold (training.pipeline.centre_selection); None: every candidate on
    every fold with all rows, whatever the size."""
    centre_screen_margin: float = 0.15
    """A candidate is dropped at the screen when its error is more than this share above the best candidate's:
    the race's margin and what a screen's few rows can misjudge a candidate by."""
    centre_race_margin: float = 0.10
    """A candidate is dropped between folds of the race when its error so far is more than this share above the
    best's."""
    centre_race_rows: int | None = 500
    """Below centre_screen_rows the race starts once the folds seen hold this many rows (and from fold
    training.pipeline.centre_selection.RACE_FOLDS on); None: only above it (centre_screen_rows=None: no race
    either)."""
    primary: str = "auto"
    """The method the plain routes serve: "auto" (the smallest on held-out rows, training.pipeline.served_volume) or
    an ellipsoid method's name."""
    primary_folds: int = 3
    """The folds of the train part whose out-of-fold rows join the test rows in that choice
    (training.pipeline.served_volume; each costs one more fit of every ellipsoid method, at most the train part's
    groups); 0: the test part alone."""
    primary_tolerance: float | None = 0.05
    """The cross-fit stops (or never starts) once the leader's expected volume is within this share of the smallest
    with 95 % confidence on the held-out rows so far (training.pipeline.served_volume.leader_excess); None: every
    fold."""
    calibrate_across: tuple[str, ...] = ()
    """Per-row label columns (``Dataset.meta``: PHONEID, USERID, a day) whose units the test and calibration parts
    hold out of training (training.calibration.across); the guarantee is then for a new unit. Empty: off."""
    across_mode: str = "cross-fit"
    """How ``calibrate_across`` scores its calibration rows (training.calibration.across.MODES): "cross-fit" every
    training unit by a model of its unit fold (all units calibrate; approximate), "held-out" only units held out
    of training (exact with 9 or more at 0.9; few units in a survey)."""
    across_centre_folds: int = 20
    """Cross-fit mode: the centre's unit folds (one unit per fold up to this many units; the shapes keep
    ``cross_fit`` or 5): fold centres that miss a fifth of the units over-cover
    (training.calibration.across.UnitCrossFit)."""
    across_centre_seconds: float | None = 60.0
    """Cross-fit mode: the centre keeps ``across_centre_folds`` unit folds while its costed fit
    (training.calibration.centre_cost: seconds on the reference machine, from its kind, rows and features) times
    the folds stays within this many seconds, and never fewer than the shapes' folds; None: no limit. A dear
    centre then keeps fewer folds, the same on any machine."""
    typicality: bool = True
    """Fit the queries' typicality step (models.typicality: their conformal p-value and the shift alarm's scores) on
    the train part, calibrated on the calibration rows (across units: each row without its unit)."""
    floor_column: str | None = None
    """The per-row label column (``Dataset.meta``) holding each row's floor: the bundle then answers a floor set
    beside each ellipse, both calibrated on one joint score (training.pipeline.floors, models.floors). None: off."""
    building_column: str | None = None
    """With ``floor_column``: the column of each row's building (the floors are then (building, floor) pairs)."""
    floor_classifier: str = "auto"
    """The floor classifier: "auto" (the candidate of smallest cross-validated Brier score) or one of
    models.floors.CLASSIFIERS."""
    calibrate_for: str = "survey"
    """Whom the guarantee is for (training.pipeline.site_weights): "survey", a reading at a new position drawn as the
    surveyed ones were (every calibration position weighs the same); "site", a reading at a position uniform over
    the site (each calibration position weighted by the share of the site nearest it: for a survey whose positions
    are not spread like its users, e.g. one extended by lmve-plan where the regions were large)."""
    site_boundary: object = None
    """With calibrate_for="site": the site's polygon ((v, 2) target coordinates); None: the surveyed positions'
    convex hull widened by half their spacing."""
    centre_context: dict = field(default_factory=dict, repr=False, compare=False)
    """Set by train(), not by a user: per centre kind, what the train part decided before any centre of that kind
    was fitted (the fingerprint centre's reading space and configuration, training.pipeline.centre); every
    make_centre of that kind gets it."""

    def resolved_methods(self) -> tuple[str, ...]:
        """The methods a run fits.

        Returns
        -------
        tuple of str
            :data:`FALLBACKS` first, then ``methods`` without repeats, with ``fallbacks``; else ``methods``.
        """
        return tuple(dict.fromkeys([*FALLBACKS, *self.methods])) if self.fallbacks else tuple(self.methods)

    def target_crs(self, dataset):
        """The targets' CRS for ``dataset``: :attr:`crs`, :attr:`crs_axes` and :attr:`crs_scale` against what the
        dataset declares.

        Parameters
        ----------
        dataset : Dataset
            The data to train on.

        Returns
        -------
        models.geo.TargetCRS or None
            The CRS (:func:`training.data.site.crs_of` checks it places 2-D targets), or ``None`` for none.

        Raises
        ------
        InputError
            A CRS name pyproj does not know, or a CRS on targets that are not 2-D.
        """
        from models.geo import TargetCRS
        from training.data.site import crs_of

        if self.crs is None or isinstance(self.crs, TargetCRS):
            return self.crs
        return crs_of(dataset, None if self.crs == "dataset" else self.crs, self.crs_axes, self.crs_scale)

    def grouped(self, dataset) -> bool:
        """Whether a run on ``dataset`` uses its groups.

        Parameters
        ----------
        dataset : Dataset
            The data to train on.

        Returns
        -------
        bool
            ``use_groups`` and the dataset has groups.
        """
        return self.use_groups and getattr(dataset, "groups", None) is not None

    def resolved_cross_fit(self, grouped: bool, n_units: int | None = None) -> int:
        """The shapes' out-of-fold fold count.

        Parameters
        ----------
        grouped : bool
            The run uses groups.
        n_units : int, default=None
            The train part's groups or rows.

        Returns
        -------
        int
            ``cross_fit`` when set; else 5 with groups or ``centre="auto"``, at most ``n_units`` and 0 when
            fewer than 2; else 0 (the centre's own training residuals).
        """
        if self.cross_fit is not None:
            return self.cross_fit
        k = 5 if grouped or self.centre == "auto" else 0
        return k if n_units is None or n_units >= k else (n_units if n_units >= 2 else 0)

    def resolved_representation(self) -> str:
        """The RSSI representation, "auto" resolved.

        Returns
        -------
        str
            ``rssi_representation``, or for "auto": "dbm".
        """
        return "dbm" if self.rssi_representation == "auto" else self.rssi_representation

    def resolved_rule(self, grouped: bool) -> str:
        """The calibration rule, ``None`` resolved.

        Parameters
        ----------
        grouped : bool
            The run uses groups.

        Returns
        -------
        str
            ``calibration``, or "group-subsample" with groups and "rows" without.

        Raises
        ------
        InputError
            ``calibration`` names no rule.
        """
        from models.calibration.conformal import check_rule

        return check_rule(self.calibration or ("group-subsample" if grouped else "rows"))

    def make_shape(self, name: str):
        """A new, unfitted shape method with this configuration's seed, device and parameters.

        Parameters
        ----------
        name : str
            A registry name.

        Returns
        -------
        ShapeEstimator

        Raises
        ------
        UnknownMethodError
            ``name`` is not a registry name.
        """
        return registry.method(name).make(seed=self.seed, device=self.device, progress=self.progress,
                                          **self.method_params.get(name, {}))

    def make_centre(self, name: str | None = None):
        """A new, unfitted centre.

        Parameters
        ----------
        name : str, default=None
            A centre kind; ``None`` is ``centre``. Only the configured centre gets ``centre_params``; a
            ``"stack"`` under ``centre="auto"`` blends the other candidates.

        Returns
        -------
        Centre

        Raises
        ------
        InputError
            ``name`` is not a centre kind.
        """
        import inspect

        name = name or self.centre
        spec = registry.centre(name)
        accepts = inspect.signature(spec.estimator).parameters
        run = {k: v for k, v in (("seed", self.seed), ("device", self.device)) if k in accepts}  # the MLP's
        if name == "stack":  # seeded; with centre="auto", a blend of the other candidates
            run = {"random_state": self.seed}
            if self.centre == "auto":
                run["members"] = tuple(n for n in self.centre_candidates if n != "stack")
        return spec.make(**{**run, **(self.centre_params if name == self.centre else {}),
                            **self.centre_context.get(name, {})})


def check_config(config: TrainConfig) -> None:
    """Refuse what cannot be fitted, naming the field: no methods, an unknown method or centre, a criterion,
    screen or served-method setting out of range, a ``stack`` with fewer than two members."""
    if not config.methods:
        raise InputError(f"methods must be a non-empty subset of {', '.join(METHODS)}; got none", field="methods",
                         expected=f"a subset of {', '.join(METHODS)}", received="none")
    for name in config.methods:
        registry.method(name)
    if config.centre != "auto":
        registry.centre(config.centre)
    for name in config.centre_candidates if config.centre == "auto" else ():
        if name not in registry.CENTRES:
            raise InputError(f"centre_candidates: unknown centre {name!r}; choose from {', '.join(registry.CENTRES)}",
                             field="centre_candidates", expected=" | ".join(registry.CENTRES), received=name)
    lookup(CRITERIA, config.centre_criterion, "centre_criterion")
    check_screen(config)
    others = [n for n in config.centre_candidates if n != "stack"]
    if config.centre == "auto" and "stack" in config.centre_candidates and len(others) < 2:
        raise InputError(f"the candidate stack blends the other candidates, so it needs at least two of them; got "
                         f"{', '.join(config.centre_candidates)}", field="centre_candidates",
                         expected="stack with at least two other candidates", received=", ".join(others) or "none")
    from training.calibration.cross_fit import check_mode

    check_mode(config.calibration_mode)
    lookup(CALIBRATE_FOR, config.calibrate_for, "calibrate_for", field="calibrate_for")
    if config.calibrate_for == "site" and (config.calibrate_across or config.floor_column):
        raise InputError("calibrate_for='site' weighs a survey's positions; it does not combine with "
                         f"{'calibrate_across' if config.calibrate_across else 'floor_column'}",
                         field="calibrate_for", expected="survey with calibrate_across or floor_column",
                         received="site")
    check_primary(config.primary, config.resolved_methods())
    check_folds(config.primary_folds)
    check_tolerance(config.primary_tolerance)


def check_cross_fit(k, m: int) -> int:
    """``k`` as a fold count over ``m`` units (rows or groups), or an error naming ``cross_fit``."""
    if isinstance(k, bool) or not isinstance(k, int) or not 2 <= k <= m:
        raise InputError(f"cross_fit must be 0 (off) or a fold count in [2, {m}]; got {k!r}")
    return k


def check_screen(config: TrainConfig) -> None:
    """Refuse screen settings that cannot work, before any fitting."""
    n = config.centre_screen_rows
    if n is not None and (isinstance(n, bool) or not isinstance(n, int) or n < MIN_SCREEN_ROWS):
        raise InputError(f"centre_screen_rows must be None (off) or a row count of at least {MIN_SCREEN_ROWS}; "
                         f"got {n!r}", field="centre_screen_rows", expected=f"None or an integer >= {MIN_SCREEN_ROWS}",
                         received=repr(n))
    r = config.centre_race_rows
    if r is not None and (isinstance(r, bool) or not isinstance(r, int) or r < 1):
        raise InputError(f"centre_race_rows must be None (race only above the screen size) or a positive row count; "
                         f"got {r!r}", field="centre_race_rows", expected="None or an integer >= 1", received=repr(r))
    for name in ("centre_screen_margin", "centre_race_margin"):
        v = getattr(config, name)
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 <= v < math.inf:
            raise InputError(f"{name} must be a share >= 0 (0.1: 10 % above the best); got {v!r}", field=name,
                             expected="a finite number >= 0", received=repr(v))
