"""LMVE: a neural network that outputs ellipsoid shapes of minimal calibrated volume.

The paper's model (Alon, Arnon & Wiesel)::

    C_theta(x) = R(x)^T R(x) + eps I,     R(x) = L3 relu(L2 relu(L1 x + b1) + b2) + b3

with hidden widths ``4d`` and ``d``, trained on the training residuals in two phases (an *init* phase that
regresses ``C_theta`` onto NLE's calibrated shapes, then the *train* phase's loss
``mean_i M_theta(x_i, r_i) + lambda mean_i det(C_theta(x_i))^{1/2}``) and chosen in a third, by calibrated
volume on a held-out slice of the training rows. Beyond the paper: an ensemble of the best few networks, a
floor share of GE's shape, clipped inputs and an optional centre correction (``mean_head``).
``docs/concepts/lmve.md`` states the model and every parameter in full.

Training needs torch (imported inside :meth:`LMVEShape.fit`); a fitted LMVE is plain arrays evaluated in
numpy, so serving never imports torch."""

from __future__ import annotations

import itertools
from dataclasses import asdict, dataclass

import numpy as np

from models._validation import check_coverage, check_is_fitted, is_positive_int
from models.exceptions import BundleError, InputError
from models.centres import search
from models.centres.search import SPARSE_DENSITY, SPARSE_MIN_COLUMNS
from models.shapes.base import EllipsoidShapeEstimator

#: the paper's grid and budget (Appendix): use as ``LMVEShape(**PAPER_GRID)``
PAPER_GRID = {"learning_rates_init": (1e-3, 1e-5), "learning_rates_train": (1e-3, 1e-5),
              "dropouts": (0.1, 0.5), "max_steps": 100_000, "init_steps": None}

LOSSES = ("paper", "nll", "volume")

#: members ``n_ensemble="auto"`` serves on a small fit (not large: see ``batch_size``)
AUTO_MEMBERS = 3
#: ``forward_precision="auto"`` serves a network of more weights than this in float32 (2 MB of float64:
#: beyond a core's share of the cache, a row's forward pass streams the weights from memory)
FLOAT32_WEIGHTS = 250_000
#: a batch of at least this many rows is passed through the network in slices on the fingerprint search's
#: threads (``models.centres.search.SEARCH_THREADS``; numpy's products release the GIL)
THREAD_ROWS = 128

@dataclass(frozen=True)
class LMVEConfig:
    """One point of the hyperparameter grid."""

    lr_init: float
    lr_train: float | None  # None: the init-phase network itself, with no train phase
    dropout: float


class LMVEShape(EllipsoidShapeEstimator):
    """Learned minimal-volume ellipsoid shapes (the paper's LMVE network).

    ``fit(X, R, coverage=eta)`` tunes for the level ``eta`` given by the owner of the level, the
    :class:`~models.predictor.SplitConformalRegressor` (it calibrates the init baseline and chooses the
    configuration at that level). ``docs/concepts/lmve.md`` explains each parameter.

    Parameters
    ----------
    learning_rates_init, learning_rates_train, dropouts : tuples
        The grid; ``LMVEShape(**PAPER_GRID)`` is the paper's.
    eps : float, default=1e-3
    n_layers : {2, 3}, default=3
    init : {"nle", "none"}, default="nle"
    lambda_ : "auto" or float, default="auto"
    max_steps : int, default=2000
    init_steps : int or None, default=500
    eval_every, patience, tol : int, int or None, float
    batch_size : int or None, default=None
    validation_fraction : float, default=0.2
    min_validation_rows : int, default=100
    stop_on : {"loss", "volume"}, default="volume"
    clip_inputs : bool, default=True
    floor_weight : float in [0, 1), default=0.05
    retire : bool or "auto", default="auto"
    init_candidates : bool, default=True
    n_ensemble : int or "auto", default="auto"
    device : str, default="auto"
    random_state : int, default=0
    progress : bool, default=False
    loss : {"paper", "nll", "volume"}, default="paper"
    output : {"gram", "cholesky"} or None
    precision : {"auto", "float32", "bfloat16"}, default="auto"
    forward_precision : {"auto", "float64", "float32"}, default="auto"
    halve_every : int, None or "auto", default="auto"
    drop_constant : bool, default=True
    mean_head : bool, default=False

    Attributes
    ----------
    config_ : LMVEConfig
        The configuration of the first member (smallest held-out volume).
    grid_results_ : list of dict
        Held-out calibrated volume and stopping step per candidate; a served one has ``member``, its rank.
    layers_ : list of (ndarray (k, in, out), ndarray (k, out))
        The ``k`` served networks' weights, stacked, in ``forward_precision_``.
    forward_precision_ : {"float64", "float32"}
    input_low_, input_high_ : ndarray (d,)
        The box queries are clipped onto (infinite: no clipping).
    floor_shape_ : ndarray (n, n)
        GE's shape in target units; ``floor_weight_`` its share.
    target_scale_ : float
        The residual scale inside the optimiser.
    lambda_value_ : float
    history_ : dict
        Per phase: steps run, seconds taken and torch threads used."""

    tunes_to_coverage = True

    def __init__(
        self,
        learning_rates_init: tuple[float, ...] = (1e-2, 1e-3),
        learning_rates_train: tuple[float, ...] = (1e-2, 1e-3),
        dropouts: tuple[float, ...] = (0.1, 0.5),
        eps: float = 1e-3,
        n_layers: int = 3,
        init: str = "nle",
        lambda_: str | float = "auto",
        max_steps: int = 2000,
        init_steps: int | None = 500,
        eval_every: int = 25,
        patience: int | None = 6,
        batch_size: int | None = None,
        validation_fraction: float = 0.2,
        min_validation_rows: int = 100,
        stop_on: str = "volume",
        clip_inputs: bool = True,
        floor_weight: float = 0.05,
        retire: bool | str = "auto",
        init_candidates: bool = True,
        n_ensemble: int | str = "auto",
        device: str = "auto",
        random_state: int = 0,
        progress: bool = False,
        loss: str = "paper",
        output: str | None = None,
        precision: str = "auto",
        halve_every: int | str | None = "auto",
        drop_constant: bool = True,
        tol: float = 1e-4,
        mean_head: bool = False,
        forward_precision: str = "auto",
    ):
        self.learning_rates_init = learning_rates_init
        self.learning_rates_train = learning_rates_train
        self.dropouts = dropouts
        self.eps = eps
        self.n_layers = n_layers
        self.init = init
        self.lambda_ = lambda_
        self.max_steps = max_steps
        self.init_steps = init_steps
        self.eval_every = eval_every
        self.patience = patience
        self.batch_size = batch_size
        self.validation_fraction = validation_fraction
        self.min_validation_rows = min_validation_rows
        self.stop_on = stop_on
        self.clip_inputs = clip_inputs
        self.floor_weight = floor_weight
        self.retire = retire
        self.init_candidates = init_candidates
        self.n_ensemble = n_ensemble
        self.device = device
        self.random_state = random_state
        self.progress = progress
        self.loss = loss
        self.output = output
        self.precision = precision
        self.halve_every = halve_every
        self.drop_constant = drop_constant
        self.tol = tol
        self.mean_head = mean_head
        self.forward_precision = forward_precision

    # ------------------------------------------------------------------ helpers
    def _hidden(self, d: int) -> list[int]:
        if self.n_layers not in (2, 3):
            raise InputError(f"n_layers must be 2 or 3; got {self.n_layers}", field="n_layers", expected="2 or 3",
                             received=repr(self.n_layers))
        return [4 * d, d][: self.n_layers - 1]

    def _configs(self) -> list[LMVEConfig]:
        for name in ("learning_rates_init", "learning_rates_train", "dropouts"):
            if len(getattr(self, name)) == 0:
                raise InputError(f"{name} must list at least one value", field=name, expected="at least one value",
                                 received="none")
        if any(not 0.0 <= p < 1.0 for p in self.dropouts):
            raise InputError(f"dropouts must lie in [0, 1); got {self.dropouts}", field="dropouts",
                             expected="values in [0, 1)", received=str(self.dropouts))
        return [LMVEConfig(a, b, p) for a, b, p in itertools.product(
            self.learning_rates_init, self.learning_rates_train, self.dropouts)]

    def _check_params(self, m: int):
        def bad(name, expected):
            value = getattr(self, name)
            return InputError(f"{name} must be {expected}; got {value!r}", field=name, expected=expected,
                              received=repr(value))

        if self.init not in ("nle", "none"):
            raise bad("init", "'nle' or 'none'")
        if not (isinstance(self.lambda_, (int, float)) and self.lambda_ > 0) and self.lambda_ != "auto":
            raise bad("lambda_", "'auto' or a positive number")
        if not 0.0 < float(self.validation_fraction) < 1.0:
            raise InputError(f"validation_fraction must lie in (0, 1); got {self.validation_fraction}",
                             field="validation_fraction", expected="a number in (0, 1)",
                             received=repr(self.validation_fraction))
        n_val = self._n_validation(m)
        if m - n_val < 20 or n_val < 10:
            raise InputError(f"LMVEShape needs at least 20 rows to fit and 10 held out (validation_fraction="
                             f"{self.validation_fraction}); X has {m} rows", field="X",
                             expected="at least 30 rows", received=f"{m} rows")
        if self.eps <= 0:
            raise bad("eps", "positive")
        if self.batch_size is not None and not is_positive_int(self.batch_size):
            raise bad("batch_size", "None (automatic) or a positive integer")
        if not is_positive_int(self.max_steps):
            raise bad("max_steps", "a positive integer")
        if self.init_steps is not None and not is_positive_int(self.init_steps):
            raise bad("init_steps", "a positive integer or None")
        if self.n_ensemble != "auto" and not is_positive_int(self.n_ensemble):
            raise bad("n_ensemble", "'auto' or a positive integer")
        if self.loss not in LOSSES:
            raise bad("loss", f"one of {', '.join(LOSSES)}")
        if not 0.0 <= float(self.floor_weight) < 1.0:
            raise InputError(f"floor_weight must lie in [0, 1); got {self.floor_weight}", field="floor_weight",
                             expected="a number in [0, 1)", received=repr(self.floor_weight))
        if self.stop_on not in ("loss", "volume"):
            raise bad("stop_on", "'loss' or 'volume'")
        if self._output() not in ("gram", "cholesky"):
            raise bad("output", "'gram' or 'cholesky'")
        if self.halve_every not in (None, "auto") and not is_positive_int(self.halve_every):
            raise bad("halve_every", "'auto', None or a positive integer")
        if self.retire != "auto" and not isinstance(self.retire, bool):
            raise bad("retire", "'auto', True or False")
        if self.precision not in ("auto", "float32", "bfloat16"):
            raise bad("precision", "'auto', 'float32' or 'bfloat16'")
        if not isinstance(self.mean_head, (bool, np.bool_)):
            raise bad("mean_head", "True or False")
        if self.forward_precision not in ("auto", "float64", "float32"):
            raise bad("forward_precision", "'auto', 'float64' or 'float32'")

    def _n_validation(self, m: int) -> int:
        """Held-out rows: ``validation_fraction`` of ``m``, raised to ``min_validation_rows`` (at most half)."""
        return max(int(round(m * self.validation_fraction)), min(int(self.min_validation_rows), m // 2))

    def _output(self) -> str:
        return self.output or ("cholesky" if self.loss == "nll" else "gram")

    # ---------------------------------------------------------------------- fit
    def fit(self, X, R, coverage: float = 0.9, groups=None) -> "LMVEShape":
        """Train the networks and choose the served members, tuned for a level.

        Parameters
        ----------
        X : array-like of shape (m, d)
            Standardised features of the training rows.
        R : array-like of shape (m, n)
            Their residuals ``y - mu(x)``.
        coverage : float in (0, 1), default=0.9
            The level the choice of networks minimises calibrated volume at.
        groups : array-like of shape (m,), default=None
            The rows' groups: the held-out slice then holds whole groups, so that early stopping and the
            choice see rows from groups the networks did not train on.

        Returns
        -------
        self : LMVEShape

        Raises
        ------
        InputError
            Rows that are not finite or do not match, ``coverage`` outside (0, 1), or a hyperparameter out of its
            range (the message names it).
        """
        import time

        from models.shapes._lmve_torch import Candidate, LMVEFit  # torch: training only

        X, R = self._validate_fit(X, R)
        coverage = check_coverage(coverage)
        self._check_params(X.shape[0])
        configs = self._configs()
        job = LMVEFit(self, X, R, coverage, groups)
        self.target_scale_, self.lambda_value_ = job.scale, job.lam
        self.history_, candidates = {}, []
        precision = "float32" if job.dtype is None else "bfloat16"

        # phase 1 (init) depends on (lr_init, dropout) only: each distinct pair trains once, and is
        # copied to every configuration that shares it
        init_keys = list(dict.fromkeys((c.lr_init, c.dropout) for c in configs))
        init_index = [init_keys.index((c.lr_init, c.dropout)) for c in configs]
        if self.init == "nle":
            init_net = job.new_grid([p for _, p in init_keys])
            init = job.init_phase(init_net, [a for a, _ in init_keys])
            self.history_["init"] = {"steps": init.steps, "seconds": init.seconds, "networks": len(init_keys),
                                     "network_steps": init.left_at.tolist(), "precision": precision,
                                     "threads": init.threads}
            if job.schedule.halve_every:
                # successive halving goes on across the phases: only the init networks still training
                # when the init phase ended start train-phase configurations
                alive = set(np.flatnonzero(init.left_at == init.steps).tolist())
                configs = [c for c, i in zip(configs, init_index) if i in alive]
                init_index = [i for i in init_index if i in alive]
            net = init_net.gather(init_index, [c.dropout for c in configs])
        else:
            net = job.new_grid([c.dropout for c in configs])

        # phase 2 (train): every configuration from its init network
        train = job.train_phase(net, [c.lr_train for c in configs])
        self.history_["train"] = {"steps": train.steps, "seconds": train.seconds, "networks": len(configs),
                                  "network_steps": train.left_at.tolist(), "precision": precision,
                                  "threads": train.threads}

        # phase 3 (selection): by calibrated volume on the held-out rows, among the trained networks
        # and (init_candidates) the init-phase ones, the fallback where the train phase overfits
        t0 = time.perf_counter()
        for k, cfg in enumerate(configs):
            row = {"stage": "train", **asdict(cfg), "best_step_train": int(train.best_step[k])}
            if self.init == "nle":
                row["best_step_init"] = int(init.best_step[init_index[k]])
            candidates.append(Candidate(net, k, cfg, row))
        if self.init == "nle" and self.init_candidates:
            for k, (lr, p) in enumerate(init_keys):
                cfg = LMVEConfig(lr, None, p)
                candidates.append(Candidate(init_net, k, cfg, {"stage": "init", **asdict(cfg),
                                                               "best_step_init": int(init.best_step[k])}))
        k = (1 if job.large else AUTO_MEMBERS) if self.n_ensemble == "auto" else int(self.n_ensemble)
        members = job.rank(candidates)[:k]
        self.history_["selection"] = {"seconds": time.perf_counter() - t0, "candidates": len(candidates)}
        for rank, c in enumerate(members):
            c.row["member"] = rank
        self.grid_results_ = [c.row for c in candidates]
        self.config_ = members[0].config

        self._store(job, members, X.shape[1])
        self._fold()
        return self

    def _store(self, job, members, d: int) -> None:
        """The chosen ``members``' weights as the served stack (zero first-layer weights for the ``d``
        columns the networks did not see), and what prediction needs of the fit ``job``."""
        nets = [c.net.numpy_layers(c.index) for c in members]
        self.forward_precision_ = self._forward_dtype(sum(W.size + b.size for W, b in nets[0]))
        self.layers_ = [(np.stack([net[i][0] for net in nets]).astype(self.forward_precision_),
                         np.stack([net[i][1] for net in nets]).astype(self.forward_precision_))
                        for i in range(len(nets[0]))]
        W0 = np.zeros((len(nets), d, self.layers_[0][0].shape[2]), dtype=self.forward_precision_)
        W0[:, job.columns] = self.layers_[0][0]  # columns the networks did not see get zero weights
        self.layers_[0] = (W0, self.layers_[0][1])
        self.n_input_columns_ = int(len(job.columns))
        low, high = job.input_box if self.clip_inputs else (np.full(d, -np.inf), np.full(d, np.inf))
        self.input_low_, self.input_high_ = np.asarray(low, float), np.asarray(high, float)
        self.floor_weight_ = float(self.floor_weight)
        self.floor_shape_ = job.ge_shape.double().cpu().numpy() * job.scale**2
        self.output_ = job.output
        self.mean_head_ = bool(self.mean_head)

    # ------------------------------------------------------------------ predict
    def chosen_grid(self) -> dict:
        """The grid narrowed to the served members' configurations.

        ``set_params(**chosen_grid())`` on a new shape fits those configurations alone: the unit folds of
        ``--calibrate-across`` (:func:`training.calibration.across.fold_regressor`) refit the served
        choice instead of searching the grid again.

        Returns
        -------
        dict
            ``learning_rates_init``, ``learning_rates_train`` and ``dropouts`` holding the values the members
            used (an init-phase member adds no train rate; with none left, the train rates stay as they were).

        Raises
        ------
        NotFittedError
            The shape was never fitted.
        """
        check_is_fitted(self, "grid_results_", "narrowed")
        members = sorted((r for r in self.grid_results_ if "member" in r), key=lambda r: r["member"])
        train = tuple(dict.fromkeys(r["lr_train"] for r in members if r["lr_train"] is not None))
        return {"learning_rates_init": tuple(dict.fromkeys(r["lr_init"] for r in members)),
                "learning_rates_train": train or tuple(self.learning_rates_train),
                "dropouts": tuple(dict.fromkeys(r["dropout"] for r in members))}

    def _fold(self) -> None:
        """Fold ``C = (1 - w)(s^2 F + eps I) + w G`` into ``k F + K``, note whether clipping applies, and lay
        the members' first layers side by side (one (d, k h) product serves them all)."""
        w, n = self.floor_weight_, self.n_targets_
        self._k = (1.0 - w) * self.target_scale_**2
        self._K = (1.0 - w) * self.eps * np.eye(n) + w * self.floor_shape_
        self._clip = bool(np.isfinite(self.input_low_).any() or np.isfinite(self.input_high_).any())
        W0, b0 = self.layers_[0]
        self._W0 = np.ascontiguousarray(W0.transpose(1, 0, 2).reshape(W0.shape[1], -1))
        self._b0 = b0.reshape(-1)
        # clipped inputs of many columns (fingerprints) minus their lower bound are mostly zero; the constant
        # part in float64 from the exact weights, then in the forward's precision
        self._floor_out = ((self.input_low_ @ self._W0.astype(np.float64, copy=False) + self._b0).astype(W0.dtype)
                           if np.isfinite(self.input_low_).all() and self._W0.shape[0] >= SPARSE_MIN_COLUMNS
                           else None)

    def _forward_dtype(self, weights: int) -> str:
        """The forward pass's precision for a network of ``weights`` weights (``forward_precision``)."""
        if self.forward_precision != "auto":
            return self.forward_precision
        return "float32" if weights > FLOAT32_WEIGHTS else "float64"

    @property
    def n_members_(self) -> int:
        """How many networks are served (their shapes averaged)."""
        return int(self.layers_[0][0].shape[0])

    def _first_layer(self, h: np.ndarray) -> np.ndarray:
        """``h W0 + b0`` (all members' first layers side by side); as ``(h - low) W0 + (low W0 + b0)`` when
        the clipped rows ``h`` minus the clip box's lower bound ``low`` are sparse (``SPARSE_DENSITY``:
        fingerprints, where nothing-detected is the floor), a sparse product over the nonzeros. The two
        agree to about ``1e-15`` of the layer's output (the summation order differs); a single row
        gathers its nonzero columns' weights instead of building a CSR matrix."""
        W, b = self._W0, self._b0
        if self._floor_out is not None:
            D = h - self.input_low_
            if len(D) == 1:
                nz = np.flatnonzero(D[0])
                if nz.size <= SPARSE_DENSITY * D.size:
                    return (D[0, nz].astype(W.dtype, copy=False) @ W[nz] + self._floor_out)[None]
            elif np.count_nonzero(D) <= SPARSE_DENSITY * D.size:
                from scipy.sparse import csr_matrix

                D = D.astype(W.dtype, copy=False)
                flat = np.flatnonzero(D)  # row by row: CSR's order (built here at half scipy's cost from dense)
                rows, cols = np.divmod(flat, D.shape[1])
                S = csr_matrix((D.ravel()[flat], cols, np.searchsorted(rows, np.arange(D.shape[0] + 1))),
                               shape=D.shape)
                out = S @ W
                out += self._floor_out
                return out
        out = h.astype(W.dtype, copy=False) @ W
        out += b
        return out

    def _forward(self, h: np.ndarray) -> np.ndarray:
        """(k, N, out) float64: every member's last layer on the clipped rows ``h`` (N, d), computed in
        ``forward_precision_``."""
        k, N = self.n_members_, h.shape[0]
        h = self._first_layer(h)
        h = h.reshape(N, k, -1).transpose(1, 0, 2)  # (k, N, width)
        for W, b in self.layers_[1:]:
            np.maximum(h, 0.0, out=h)
            h = np.matmul(h, W)
            h += b[:, None, :]
        return h.astype(np.float64, copy=False)  # the shapes in float64 from here

    def predict_parts(self, X) -> tuple[np.ndarray, np.ndarray | None]:
        """One forward pass of every member: the shapes and the centre corrections.

        A batch of ``THREAD_ROWS`` rows or more goes through the network in contiguous slices on the search's
        threads; each row's answer is the one it gets alone, to the rounding of the library's products.

        Parameters
        ----------
        X : ndarray of shape (N, d)
            Checked standardised features.

        Returns
        -------
        shapes : ndarray of shape (N, n, n)
            The members' mean of ``(1 - w)(s^2 F(x) + eps I) + w G`` in float64, ``F = R^T R`` or ``L L^T``.
        delta : ndarray of shape (N, n) or None
            The members' mean of ``s delta(x)``; ``None`` without a mean head.
        """
        h = np.minimum(np.maximum(X, self.input_low_), self.input_high_) if self._clip else X
        k, N = self.n_members_, h.shape[0]
        threads = search.SEARCH_THREADS
        if N >= THREAD_ROWS and threads > 1:  # a batch: contiguous slices of rows on the search's threads
            step = -(-N // threads)
            h = np.concatenate(search.map_chunks(self._forward, [h[i:i + step] for i in range(0, N, step)]), axis=1)
        else:
            h = self._forward(h)
        n = self.n_targets_
        out = h[..., : n * n].reshape(k, N, n, n)
        if self.output_ == "gram":
            C = np.matmul(out.transpose(0, 1, 3, 2), out)
        else:
            L = np.tril(out, k=-1)
            idx = np.arange(n)
            L[..., idx, idx] = np.logaddexp(0.0, out[..., idx, idx])  # softplus
            C = L @ np.swapaxes(L, -1, -2)
        C = C[0] if k == 1 else C.mean(axis=0)
        C *= self._k
        C += self._K
        offset = h[..., n * n:].mean(axis=0) * self.target_scale_ if self.mean_head_ else None
        return C, offset

    @property
    def moves_centre(self) -> bool:
        """Whether the fitted networks have a mean head (their regions are centred on ``mu(x) + delta(x)``)."""
        return bool(getattr(self, "mean_head_", False))

    def predict_shape(self, X) -> np.ndarray:
        """The shapes of checked rows.

        Parameters
        ----------
        X : ndarray of shape (N, d)
            Checked standardised features.

        Returns
        -------
        ndarray of shape (N, n, n)
            ``(1 - w)(s^2 F(x) + eps I) + w G`` in float64, ``F = R^T R`` or ``L L^T``.
        """
        return self.predict_parts(X)[0]

    def to_arrays(self):
        params = {"n_layers": len(self.layers_), "eps": self.eps, "target_scale": self.target_scale_,
                  "forward_precision": self.forward_precision_,
                  "floor_weight": self.floor_weight_, "output": self.output_, "n_features": self.n_features_in_,
                  "loss": self.loss, "batch_size": self.batch_size, "mean_head": self.mean_head_,
                  "n_targets": self.n_targets_,
                  "config": None if getattr(self, "config_", None) is None else asdict(self.config_),
                  "history": getattr(self, "history_", None)}
        arrays = {"input_low": self.input_low_, "input_high": self.input_high_, "floor_shape": self.floor_shape_}
        for i, (W, b) in enumerate(self.layers_):
            arrays[f"W_{i}"], arrays[f"b_{i}"] = W, b
        return params, arrays

    @classmethod
    def from_arrays(cls, params, arrays):
        """Rebuild the fitted LMVE shape from what :meth:`to_arrays` gave.

        Parameters
        ----------
        params : dict
            JSON-able parameters.
        arrays : dict of str -> ndarray
            The fitted arrays.

        Returns
        -------
        LMVEShape
            Fitted.

        Raises
        ------
        BundleError
            A ``forward_precision`` that is neither float64 nor float32.
        """
        mean_head = bool(params.get("mean_head", False))
        est = cls(eps=float(params["eps"]), loss=params.get("loss", "paper"), batch_size=params.get("batch_size"),
                  mean_head=mean_head)
        k = int(params["n_layers"])
        est.forward_precision_ = str(params.get("forward_precision", "float64"))  # float64 before the parameter
        if est.forward_precision_ not in ("float64", "float32"):
            raise BundleError(f"lmve: forward_precision {est.forward_precision_!r} is not float64 or float32")
        # a bundle of one network written before ensembles holds (in, out) / (out,) arrays
        est.layers_ = [(_members(arrays[f"W_{i}"], 3, est.forward_precision_),
                        _members(arrays[f"b_{i}"], 2, est.forward_precision_)) for i in range(k)]
        est.n_features_in_ = int(params["n_features"])
        est.n_targets_ = int(params.get("n_targets") or round(np.sqrt(est.layers_[-1][1].shape[-1])))
        est.mean_head_ = mean_head
        est.input_low_, est.input_high_ = np.asarray(arrays["input_low"], float), np.asarray(arrays["input_high"], float)
        est.floor_shape_ = np.asarray(arrays["floor_shape"], float)
        est.floor_weight_, est.target_scale_ = float(params["floor_weight"]), float(params["target_scale"])
        est.output_ = str(params["output"])
        est.config_ = LMVEConfig(**params["config"]) if params.get("config") else None
        est.history_ = params.get("history")
        est._fold()
        return est


def _members(a, ndim: int, dtype: str = "float64") -> np.ndarray:
    """A stored weight array in ``dtype``, with its leading member axis (added when a bundle stored one network)."""
    a = np.asarray(a, dtype)
    return a[None] if a.ndim == ndim - 1 else a
