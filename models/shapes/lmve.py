"""LMVE: a neural network that outputs ellipsoid shapes of minimal calibrated volume.

The paper's model (Alon, Arnon & Wiesel)::

    C_theta(x) = R(x)^T R(x) + eps I,     R(x) = L3 relu(L2 relu(L1 x + b1) + b2) + b3

with hidden widths ``4d`` and ``d``, dropout after each ReLU, trained in two phases on the
training residuals:

1. *init*: regress ``C_theta(x_i)`` onto a baseline ``C_B(x_i)`` (NLE fitted and calibrated on
   the training rows themselves) with the mean squared Frobenius error;
2. *train*: minimise ``mean_i M_theta(x_i, r_i) + lambda mean_i det(C_theta(x_i))^{1/2}``,
   ``M = r^T C^{-1} r``, ``lambda = mean_i M_B / mean_i det(C_B)^{1/2}``.

How this implementation makes that fast without changing the model family:

* all grid configurations (learning rate per phase x dropout: 8 in the paper) are trained at
  once as **one batched model**: each weight tensor carries a leading configuration axis, one
  forward/backward and one Adam step serve all, and each configuration keeps its own learning
  rate through a reparametrisation (see :class:`BatchedShapeNet`); the init phase, which
  depends only on (learning rate, dropout), trains each distinct pair once;
* each phase stops early on a **held-out slice of the training rows** (never the calibration
  rows): the init phase on its loss, the train phase on the calibrated volume; each
  configuration keeps its best weights;
* the configuration is chosen by its **calibrated volume on that held-out slice**: conformal
  threshold at the target coverage, then the mean ``det(alpha C)^{1/2}``, the quantity the method
  exists to minimise;
* the residuals are divided by one global scale ``s`` inside the optimiser
  (``C = s^2 (R^T R) + eps I`` with ``eps`` in target units, exactly the paper's family) so that
  Adam's step sizes mean the same thing on every dataset;
* mini-batches for large training sets, CUDA when present; deterministic for a seed on CPU.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from models.conformal import conformal_quantile, conformal_rank
from models._validation import is_positive_int
from models.exceptions import InputError
from models.shapes.base import EllipsoidShapeEstimator, second_moment
from models.shapes.nle import NearestNeighbourEllipsoid


def resolve_device(device: str | None) -> torch.device:
    """``"auto"``/``None`` -> CUDA when present, else CPU; otherwise ``torch.device(device)``."""
    if device in (None, "auto"):
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        dev = torch.device(device)
    except RuntimeError as exc:
        raise InputError(f"device must be 'auto', 'cpu' or 'cuda[:i]'; got {device!r} ({exc})") from None
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise InputError(f"device {device!r} was asked for but CUDA is not available on this machine")
    return dev


def mahalanobis_and_sqrt_det(C: torch.Tensor, r: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``r^T C^{-1} r`` and ``det(C)^{1/2}`` for SPD ``C`` (..., n, n) and ``r`` (..., n).

    Closed form for n = 2 (the localisation case, and much faster than batched LAPACK calls on
    CPU); Cholesky otherwise.
    """
    if C.shape[-1] == 2:
        a, b, c = C[..., 0, 0], C[..., 0, 1], C[..., 1, 1]
        det = a * c - b * b
        r1, r2 = r[..., 0], r[..., 1]
        M = (c * r1 * r1 - 2.0 * b * r1 * r2 + a * r2 * r2) / det
        return M, torch.sqrt(det)
    L = torch.linalg.cholesky(C)
    z = torch.linalg.solve_triangular(L, r.unsqueeze(-1), upper=False).squeeze(-1)
    return (z * z).sum(-1), torch.diagonal(L, dim1=-2, dim2=-1).prod(-1)


#: the paper's grid and budget (Appendix): use as ``LMVEShape(**PAPER_GRID)``
PAPER_GRID = {"learning_rates_init": (1e-3, 1e-5), "learning_rates_train": (1e-3, 1e-5),
              "dropouts": (0.1, 0.5), "max_steps": 100_000}

#: a held-out loss must improve by this relative amount to count (the authors' code: 1e-5
#: over 100 steps); per configuration, so a slow 1e-5-learning-rate member stops on its own.
_REL_TOL = 1e-4


def factor_product(out: torch.Tensor, output: str) -> torch.Tensor:
    """Map the net's ``(..., n, n)`` output to a PSD matrix.

    ``"gram"`` (the paper): ``R^T R``. ``"cholesky"``: ``L L^T`` with ``L`` the lower triangle of
    the output and a softplus on its diagonal, so that ``log det`` is a sum of logs.
    """
    if output == "gram":
        return out.transpose(-1, -2) @ out
    L = torch.tril(out, diagonal=-1) + torch.diag_embed(torch.nn.functional.softplus(torch.diagonal(out, 0, -2, -1)))
    return L @ L.transpose(-1, -2)


LOSSES = ("paper", "nll", "volume")


@dataclass(frozen=True)
class LMVEConfig:
    """One point of the hyperparameter grid."""

    lr_init: float
    lr_train: float | None  # None: the init-phase network itself, with no train phase
    dropout: float


class BatchedShapeNet(nn.Module):
    """``K`` independent LMVE networks evaluated in one pass: ``x (B, d) -> R (K, B, n, n)``.

    Every layer is one ``(K, in, out)`` tensor, so one forward/backward serves all
    configurations. Each configuration trains at its own learning rate through a
    reparametrisation: the weights are ``W_k = c_k V_k`` and one Adam at ``lr_base`` updates
    ``V``. Since Adam's step is invariant to the gradient's scale, the step on ``W_k`` is that of
    Adam at ``lr_k = c_k lr_base`` (with Adam's ``eps`` divided by ``c_k``, immaterial at 1e-8).
    """

    def __init__(self, widths: list[int], dropouts: list[float], n: int, generator: torch.Generator):
        super().__init__()
        self.widths, self.n = list(widths), n
        K = len(dropouts)
        self.register_buffer("p_drop", torch.tensor(dropouts, dtype=torch.float32)[:, None, None])
        self.register_buffer("lr_scale", torch.ones(K, 1, 1))
        self.V = nn.ParameterList()
        self.b = nn.ParameterList()
        for fan_in, fan_out in zip(widths[:-1], widths[1:]):
            bound = 1.0 / math.sqrt(fan_in)  # nn.Linear's default initialisation
            self.V.append(nn.Parameter((torch.rand(K, fan_in, fan_out, generator=generator) * 2 - 1) * bound))
            self.b.append(nn.Parameter((torch.rand(K, 1, fan_out, generator=generator) * 2 - 1) * bound))

    @property
    def n_configs(self) -> int:
        return self.p_drop.shape[0]

    def set_learning_rates(self, lrs: list[float]) -> float:
        """Rescale so configuration ``k`` trains at ``lrs[k]``; return the base rate for Adam."""
        base = max(lrs)
        new = torch.tensor(lrs, dtype=torch.float32, device=self.lr_scale.device)[:, None, None] / base
        with torch.no_grad():
            for p in [*self.V, *self.b]:
                p.mul_(self.lr_scale / new)  # keep W = c V unchanged
        self.lr_scale.copy_(new)
        return base

    def gather(self, index: list[int], dropouts: list[float]) -> "BatchedShapeNet":
        """A new batched net whose configuration ``k`` starts from this net's ``index[k]``."""
        new = BatchedShapeNet(self.widths, dropouts, self.n, torch.Generator().manual_seed(0))
        new = new.to(self.lr_scale.device)
        idx = torch.as_tensor(index, device=self.lr_scale.device)
        with torch.no_grad():
            for i in range(len(self.V)):
                W, b = self.layer(i)
                new.V[i].copy_(W[idx])
                new.b[i].copy_(b[idx])
        return new

    def state(self) -> tuple[list[torch.Tensor], torch.Tensor, torch.Tensor]:
        """Copies of the raw parameters and of the per-configuration buffers (for :meth:`restore`)."""
        return [p.detach().clone() for p in self.parameters()], self.p_drop.clone(), self.lr_scale.clone()

    def restore(self, params: list[torch.Tensor], p_drop: torch.Tensor, lr_scale: torch.Tensor) -> None:
        """Set parameters and buffers (any number of configurations) from :meth:`state`-like copies."""
        with torch.no_grad():
            for plist, values in ((self.V, params[: len(self.V)]), (self.b, params[len(self.V):])):
                for i, v in enumerate(values):
                    plist[i] = nn.Parameter(v.clone())
        self.p_drop, self.lr_scale = p_drop.clone(), lr_scale.clone()

    def select_(self, keep: torch.Tensor, optimizer: torch.optim.Optimizer | None = None):
        """Keep only configurations ``keep`` (in place); slice ``optimizer``'s moments to match.

        Returns the new optimizer (same class and hyperparameters) over the sliced parameters,
        so that the kept configurations continue exactly as they would have in the full batch.
        """
        old = list(self.parameters())
        self.restore([p.detach()[keep] for p in old], self.p_drop[keep], self.lr_scale[keep])  # restore copies
        if optimizer is None:
            return None
        new_opt = type(optimizer)(self.parameters(), **optimizer.defaults)
        for p_old, p_new in zip(old, self.parameters()):
            st = optimizer.state.get(p_old)
            if st:
                new_opt.state[p_new] = {k: (v[keep].clone() if torch.is_tensor(v) and v.dim() > 0 else v)
                                        for k, v in st.items()}
        return new_opt

    def layer(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        """The effective ``(W, b)`` of layer ``i``: ``(K, in, out)`` and ``(K, 1, out)``."""
        return self.V[i] * self.lr_scale, self.b[i] * self.lr_scale

    def forward(self, x: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
        n_layers = len(self.V)
        W, b = self.layer(0)
        h = torch.einsum("bd,kdh->kbh", x, W) + b
        for i in range(1, n_layers):
            h = torch.relu(h)
            if self.training:
                # one uniform draw per (row, unit), shared by the configurations: each still gets
                # exact Bernoulli(keep_k) dropout, and the models stay independent of each other
                # in everything that matters; K times fewer random numbers (the step's main cost)
                keep = 1.0 - self.p_drop
                u = torch.rand(h.shape[1:], generator=generator, device=h.device)
                h = h * (u < keep).to(h.dtype).mul_(1.0 / keep)  # 2x faster than torch.where
            W, b = self.layer(i)
            h = torch.baddbmm(b, h, W)
        return h.reshape(h.shape[0], h.shape[1], self.n, self.n)


def _adam(params, lr: float) -> torch.optim.Optimizer:
    """Adam, fused where this torch build supports it on the parameters' device."""
    params = list(params)
    try:
        return torch.optim.Adam(params, lr=lr, fused=True)
    except (RuntimeError, TypeError):
        return torch.optim.Adam(params, lr=lr)


class ShapeNet(nn.Module):
    """The single selected LMVE network (what a bundle stores as a ``state_dict``)."""

    def __init__(self, d: int, n: int, hidden: list[int], output: str = "gram"):
        super().__init__()
        widths = [d, *hidden, n * n]
        self.n, self.output = n, output
        self.layers = nn.ModuleList(nn.Linear(a, b) for a, b in zip(widths[:-1], widths[1:]))
        # the box of the training inputs; a query outside it is clipped onto it (+-inf: no clipping)
        self.register_buffer("input_low", torch.full((d,), -math.inf))
        self.register_buffer("input_high", torch.full((d,), math.inf))
        # C = (1 - w) (s^2 F + eps I) + w G: a share w of GE's constant shape G (target units)
        self.register_buffer("floor_weight", torch.zeros(()))
        self.register_buffer("floor_shape", torch.zeros(n, n))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = torch.minimum(torch.maximum(x, self.input_low), self.input_high)
        for i, layer in enumerate(self.layers):
            x = layer(x)
            if i < len(self.layers) - 1:
                x = torch.relu(x)  # dropout is the identity at inference
        return x.reshape(x.shape[0], self.n, self.n)


class LMVEShape(EllipsoidShapeEstimator):
    """Learned minimal-volume ellipsoid shapes (the paper's LMVE network).

    Parameters
    ----------
    coverage : float, default=0.9
        Level used to calibrate the init baseline and to choose the configuration.
    learning_rates_init, learning_rates_train, dropouts : tuples
        The grid. Default ``{1e-2, 1e-3}`` x ``{1e-2, 1e-3}`` x ``{0.1, 0.5}``: 8 configurations
        that converge within a few thousand steps. The paper's rates ``{1e-3, 1e-5}`` need its
        100,000-step budget; ``LMVEShape(**PAPER_GRID)`` selects them.
    eps : float, default=1e-3
        ``C = R^T R + eps I`` (target units squared).
    n_layers : {2, 3}, default=3
        3 is the paper's network (hidden widths 4d, d); 2 keeps one hidden layer of width 4d.
    init : {"nle", "none"}, default="nle"
        Smart initialisation on the NLE baseline, or none (an ablation).
    lambda_ : "auto" or float, default="auto"
        Volume weight; ``"auto"`` balances the two terms on the baseline as in the paper.
    max_steps : int, default=2000
        Cap on optimiser steps per phase (the paper: 100,000 full-batch steps).
    eval_every, patience : int
        Held-out loss is evaluated every ``eval_every`` steps; a phase stops when no configuration
        improved for ``patience`` evaluations (``None``: run all ``max_steps``, as the paper's budget).
    batch_size : int or None, default=None
        Mini-batch size; ``None``: full batch up to 4,096 rows, else 1,024. On a CPU, 256 is
        cheaper for large data: on indoor_localization (16,000 training rows, 519 features) seed 0
        it took 1,463 s against 3,421 s, for 2,054 against 2,060 m^2
        (``benchmarks/results/indoor.md``).
    validation_fraction : float, default=0.2
        Share of the training rows held out for early stopping and configuration choice.
    min_validation_rows : int, default=100
        Hold out at least this many rows (at most half of them) when ``validation_fraction`` gives
        fewer: the choice rests on an ``eta``-quantile of held-out scores, which 60 rows pin down
        badly (residential_building: 300 training rows).
    stop_on : {"loss", "volume"}, default="volume"
        What the train phase's early stopping (and its choice of best weights) watches on the
        held-out rows: the calibrated volume itself (conformal quantile of the held-out scores at
        ``coverage``, to the power ``n/2``, times the mean ``det(C)^1/2``: the quantity the
        configuration is chosen by, and the one the method exists to minimise), or the training
        loss. Over 50 splits "volume" gave smaller mean LMVE volumes on enb (11.1 vs 11.4) and
        ble_rssi (7.99 vs 8.27) and a smaller median on residential_building (12.7 vs 13.9), whose
        mean one bad split raised (20.9 vs 19.2); see ``benchmarks/results/beyond.md``, variant
        ``stop-loss``.
    clip_inputs : bool, default=True
        Clip each query's features onto the box of the training inputs before the network sees
        them. A ReLU network extrapolates linearly outside its data: on residential_building
        (103 features, 300 training rows) a calibration row 8 standard deviations past the
        training range got a near-singular shape, and its score inflated ``alpha_q`` (and with it
        every region) 10-fold. Inside the box nothing changes.
    floor_weight : float in [0, 1), default=0.05
        ``C = (1 - w) (R^T R + eps I) + w C_GE``: a share ``w`` of the constant GE shape (the train
        residuals' second moment), as NLE mixes 5 % of it into its own. It bounds every score by
        ``M_GE / w``, so a query where the network predicts a near-singular shape cannot blow up
        the calibrated threshold: on residential_building (300 training rows, 103 features)
        single splits reached 30x NLE's volume without it. 0 is the paper's model exactly.
    retire : bool, default=False
        Drop a configuration from the batch once its held-out loss has stalled for ``patience``
        evaluations (saves compute; each configuration then stops on its own). ``False``: all
        continue until every one has stalled, which gave smaller volumes on enb and ble_rssi.
    init_candidates : bool, default=True
        Also offer the init-phase networks (imitations of the NLE baseline) to the held-out choice.
    device : str, default="auto"
    random_state : int, default=0
    loss : {"paper", "nll", "volume"}, default="paper"
        Train-phase loss. ``"paper"``: ``mean M + lambda mean det(C)^1/2``. ``"nll"``: the Gaussian
        negative log-likelihood ``mean (M + log det C)``. ``"volume"``: the calibrated volume itself,
        ``(n/2) log q_eta(M) + log mean det(C)^1/2`` with ``q_eta`` the empirical ``eta``-quantile of the
        batch's Mahalanobis distances (minimum-volume conformal sets; differentiable through
        ``torch.quantile``).
    output : {"gram", "cholesky"} or None
        How the net's output becomes a shape: ``R^T R`` (the paper) or a Cholesky factor.
        ``None``: Cholesky for ``loss="nll"``, gram otherwise.

    Attributes
    ----------
    config_ : LMVEConfig
        The chosen configuration.
    grid_results_ : list of dict
        Held-out calibrated volume and stopping step per candidate (``stage`` "train", or "init"
        for an init-phase network, whose ``lr_train`` is ``None``).
    net_ : ShapeNet
        The chosen network (CPU, eval mode).
    target_scale_ : float
        ``s``: the residual scale used inside the optimiser.
    lambda_value_ : float
        The volume weight used (internal units).
    history_ : dict
        Per-phase steps run and seconds taken.
    """

    method_name = "lmve"

    def __init__(
        self,
        coverage: float = 0.9,
        learning_rates_init: tuple[float, ...] = (1e-2, 1e-3),
        learning_rates_train: tuple[float, ...] = (1e-2, 1e-3),
        dropouts: tuple[float, ...] = (0.1, 0.5),
        eps: float = 1e-3,
        n_layers: int = 3,
        init: str = "nle",
        lambda_: str | float = "auto",
        max_steps: int = 2000,
        eval_every: int = 25,
        patience: int | None = 6,
        batch_size: int | None = None,
        validation_fraction: float = 0.2,
        device: str = "auto",
        random_state: int = 0,
        progress: bool = False,
        loss: str = "paper",
        output: str | None = None,
        retire: bool = False,
        init_candidates: bool = True,
        min_validation_rows: int = 100,
        stop_on: str = "volume",
        clip_inputs: bool = True,
        floor_weight: float = 0.05,
    ):
        self.coverage = coverage
        self.learning_rates_init = learning_rates_init
        self.learning_rates_train = learning_rates_train
        self.dropouts = dropouts
        self.eps = eps
        self.n_layers = n_layers
        self.init = init
        self.lambda_ = lambda_
        self.max_steps = max_steps
        self.eval_every = eval_every
        self.patience = patience
        self.batch_size = batch_size
        self.validation_fraction = validation_fraction
        self.device = device
        self.random_state = random_state
        self.progress = progress
        self.loss = loss
        self.output = output
        self.retire = retire
        self.init_candidates = init_candidates
        self.min_validation_rows = min_validation_rows
        self.stop_on = stop_on
        self.clip_inputs = clip_inputs
        self.floor_weight = floor_weight

    # ------------------------------------------------------------------ helpers
    def _hidden(self, d: int) -> list[int]:
        if self.n_layers not in (2, 3):
            raise InputError(f"n_layers must be 2 or 3; got {self.n_layers}")
        return [4 * d, d][: self.n_layers - 1]

    def _configs(self) -> list[LMVEConfig]:
        for name in ("learning_rates_init", "learning_rates_train", "dropouts"):
            if len(getattr(self, name)) == 0:
                raise InputError(f"{name} must list at least one value")
        if any(not 0.0 <= p < 1.0 for p in self.dropouts):
            raise InputError(f"dropouts must lie in [0, 1); got {self.dropouts}")
        return [LMVEConfig(a, b, p) for a, b, p in itertools.product(
            self.learning_rates_init, self.learning_rates_train, self.dropouts)]

    def _check_params(self, m: int):
        if self.init not in ("nle", "none"):
            raise InputError(f"init must be 'nle' or 'none'; got {self.init!r}")
        if not (isinstance(self.lambda_, (int, float)) and self.lambda_ > 0) and self.lambda_ != "auto":
            raise InputError(f"lambda_ must be 'auto' or a positive number; got {self.lambda_!r}")
        if not 0.0 < float(self.validation_fraction) < 1.0:
            raise InputError(f"validation_fraction must lie in (0, 1); got {self.validation_fraction}")
        n_val = self._n_validation(m)
        if m - n_val < 20 or n_val < 10:
            raise InputError(
                f"LMVEShape needs at least 20 rows to fit and 10 held out (validation_fraction="
                f"{self.validation_fraction}); X has {m} rows"
            )
        if self.eps <= 0:
            raise InputError(f"eps must be positive; got {self.eps}")
        if self.batch_size is not None and not is_positive_int(self.batch_size):
            raise InputError(f"batch_size must be None (automatic) or a positive integer; got {self.batch_size!r}")
        if not is_positive_int(self.max_steps):
            raise InputError(f"max_steps must be a positive integer; got {self.max_steps!r}")
        if self.loss not in LOSSES:
            raise InputError(f"loss must be one of {', '.join(LOSSES)}; got {self.loss!r}")
        if not 0.0 <= float(self.floor_weight) < 1.0:
            raise InputError(f"floor_weight must lie in [0, 1); got {self.floor_weight}")
        if self.stop_on not in ("loss", "volume"):
            raise InputError(f"stop_on must be 'loss' or 'volume'; got {self.stop_on!r}")
        if self._output() not in ("gram", "cholesky"):
            raise InputError(f"output must be 'gram' or 'cholesky'; got {self.output!r}")

    def _n_validation(self, m: int) -> int:
        """Held-out rows: ``validation_fraction`` of ``m``, raised to ``min_validation_rows`` (at most
        half the rows): the choice rests on a 90 % quantile, which a few dozen rows pin down badly."""
        return max(int(round(m * self.validation_fraction)), min(int(self.min_validation_rows), m // 2))

    def _output(self) -> str:
        return self.output or ("cholesky" if self.loss == "nll" else "gram")

    # ---------------------------------------------------------------------- fit
    def fit(self, X, R) -> "LMVEShape":
        """Fit on standardised features ``X`` (m, d) and residuals ``R`` (m, n)."""
        import time

        X, R = self._validate_fit(X, R)
        m, d = X.shape
        n = R.shape[1]
        self._check_params(m)
        configs = self._configs()
        dev = resolve_device(self.device)
        rng = np.random.default_rng(self.random_state)
        gen = torch.Generator().manual_seed(int(self.random_state))
        gen_dev = gen if dev.type == "cpu" else torch.Generator(device=dev).manual_seed(int(self.random_state))

        perm = rng.permutation(m)
        n_val = self._n_validation(m)
        val, fit = perm[:n_val], perm[n_val:]

        # one global residual scale: C = s^2 (R^T R + eps/s^2 I)
        s = float(np.sqrt(np.mean(R[fit] ** 2)))
        s = s if s > 0 else 1.0
        self.target_scale_ = s
        eps_int = self.eps / s**2
        Rs = R / s

        # baseline B: NLE fitted and calibrated on the fit rows only
        base = NearestNeighbourEllipsoid().fit(X[fit], Rs[fit])
        CB_fit = base.predict_shape(X[fit])
        scores_B = base.conformity_scores(X[fit], Rs[fit])
        alpha_B = conformal_quantile(scores_B, self.coverage)
        CB_fit = CB_fit * alpha_B
        CB_val = base.predict_shape(X[val]) * alpha_B
        if self.lambda_ == "auto":
            sqrt_det_B = np.sqrt(np.linalg.det(CB_fit))
            lam = float(np.mean(scores_B / alpha_B) / np.mean(sqrt_det_B))
        else:
            lam = float(self.lambda_) * s**n  # a fixed lambda is given in target units
        self.lambda_value_ = lam

        t = lambda a: torch.as_tensor(a, dtype=torch.float32, device=dev)  # noqa: E731
        Xf, Xv, Rf, Rv = t(X[fit]), t(X[val]), t(Rs[fit]), t(Rs[val])
        CBf, CBv = t(CB_fit), t(CB_val)
        eye = torch.eye(n, device=dev) * eps_int

        widths = [d, *self._hidden(d), n * n]
        # the init phase depends on (lr_init, dropout) only: train each distinct pair once, then
        # copy it to every configuration that shares it before the train phase
        init_keys = list(dict.fromkeys((c.lr_init, c.dropout) for c in configs))
        init_index = [init_keys.index((c.lr_init, c.dropout)) for c in configs]
        if self.init == "nle":
            net = BatchedShapeNet(widths, [p for _, p in init_keys], n, gen).to(dev)
        else:
            net = BatchedShapeNet(widths, [c.dropout for c in configs], n, gen).to(dev)

        output = self._output()

        w = float(self.floor_weight)
        G = t(second_moment(Rs[fit]))  # GE's shape (uncentred, as NLE's global term), internal units

        def to_shape(out):
            C = factor_product(out, output) + eye
            return C if w == 0.0 else (1.0 - w) * C + w * G

        def shapes(xb):
            return to_shape(net(xb, gen_dev))

        def init_loss(xb, cb):  # (K,)
            return ((shapes(xb) - cb) ** 2).sum((-1, -2)).mean(-1)

        def train_loss(xb, rb):  # (K,)
            M, sd = mahalanobis_and_sqrt_det(shapes(xb), rb.expand(net.n_configs, *rb.shape))
            if self.loss == "nll":
                return (M + 2.0 * torch.log(sd)).mean(-1)
            if self.loss == "volume":
                return 0.5 * n * torch.log(torch.quantile(M, self.coverage, dim=-1)) + torch.log(sd.mean(-1))
            return M.mean(-1) + lam * sd.mean(-1)

        k_val = conformal_rank(len(val), self.coverage)

        def heldout_volume(xb, rb):  # (K,) calibrated volume: eta-conformal quantile^(n/2) x mean sqrt det
            M, sd = mahalanobis_and_sqrt_det(shapes(xb), rb.expand(net.n_configs, *rb.shape))
            if k_val > M.shape[-1]:
                return torch.full((net.n_configs,), math.inf, device=M.device)
            return torch.kthvalue(M, k_val, dim=-1).values ** (0.5 * n) * sd.mean(-1)

        batch = self.batch_size or (m if len(fit) <= 4096 else 1024)
        self.history_ = {}
        stop_steps = {}
        if self.init == "nle":
            t0 = time.perf_counter()
            steps, best = self._run_phase(net, [a for a, _ in init_keys], init_loss, Xf, CBf, Xv, CBv, batch, gen,
                                          "init")
            self.history_["init"] = {"steps": steps, "seconds": time.perf_counter() - t0,
                                     "networks": len(init_keys)}
            stop_steps["init"] = best[init_index]
            init_net = net
            net = net.gather(init_index, [c.dropout for c in configs])
        t0 = time.perf_counter()
        steps, stop_steps["train"] = self._run_phase(net, [c.lr_train for c in configs], train_loss, Xf, Rf, Xv, Rv,
                                                     batch, gen, "train",
                                                     held_fn=heldout_volume if self.stop_on == "volume" else None)
        self.history_["train"] = {"steps": steps, "seconds": time.perf_counter() - t0, "networks": len(configs)}

        # choose by calibrated volume on the held-out rows, among the trained networks and (with
        # init_candidates) the init-phase networks, which imitate the NLE baseline: where the
        # train phase overfits (few rows, many features), the choice falls back on them
        candidates = [(net, configs, "train")]
        if self.init == "nle" and self.init_candidates:
            candidates.append((init_net, [LMVEConfig(a, None, p) for a, p in init_keys], "init"))
        results, owners = [], []
        for cand_net, cand_configs, stage in candidates:
            cand_net.eval()
            with torch.no_grad():
                Cv = to_shape(cand_net(Xv))
                M, sd = mahalanobis_and_sqrt_det(Cv, Rv.expand(cand_net.n_configs, *Rv.shape))
            M, sd = M.double().cpu().numpy(), sd.double().cpu().numpy()
            for k, cfg in enumerate(cand_configs):
                ok = np.isfinite(M[k]).all() and np.isfinite(sd[k]).all()
                aq = conformal_quantile(M[k], self.coverage) if ok else math.inf
                vol = aq ** (n / 2) * float(np.mean(sd[k])) * s**n if ok else math.inf
                row = {"stage": stage, "lr_init": cfg.lr_init, "lr_train": cfg.lr_train, "dropout": cfg.dropout,
                       "heldout_volume": vol}
                if stage == "train":
                    row.update({f"best_step_{p}": int(v[k]) for p, v in stop_steps.items()})
                else:
                    row["best_step_init"] = int(stop_steps["init"][init_index.index(k)])
                results.append(row)
                owners.append((cand_net, k, cfg))
        vols = np.array([r["heldout_volume"] for r in results])
        if not np.isfinite(vols).any():
            raise InputError("LMVE training diverged for every configuration (non-finite shapes)")
        chosen_net, best, self.config_ = owners[int(np.nanargmin(vols))]
        self.grid_results_ = results

        single = ShapeNet(d, n, self._hidden(d), output)
        single.floor_weight.fill_(w)
        single.floor_shape.copy_(G.cpu() * s**2)
        if self.clip_inputs:
            single.input_low.copy_(torch.as_tensor(X.min(axis=0)))
            single.input_high.copy_(torch.as_tensor(X.max(axis=0)))
        with torch.no_grad():
            for i, layer in enumerate(single.layers):
                W, b = chosen_net.layer(i)
                layer.weight.copy_(W[best].detach().cpu().T)
                layer.bias.copy_(b[best, 0].detach().cpu())
        self.net_ = single.eval()
        return self

    def _run_phase(self, net, lrs, loss_fn, xa, ya, xv, yv, batch, gen, phase,
                   held_fn=None) -> tuple[int, np.ndarray]:
        """Adam over all configurations at once; early stopping and best weights per configuration.

        Every ``eval_every`` steps each configuration is scored on the held-out rows (``held_fn``,
        default ``loss_fn``); it keeps the weights of its best score. The phase ends once no
        configuration has improved for ``patience`` evaluations, or after ``max_steps``. With
        ``retire``, a configuration that has stalled that long leaves the batch at once (its best
        weights kept), and the rest run on a smaller batched model, on unchanged trajectories: the
        mini-batches and dropout draws do not depend on how many configurations are in the batch.
        Returns the steps run and each configuration's best step.
        """
        from tqdm.auto import tqdm

        K = net.n_configs
        opt = _adam(net.parameters(), net.set_learning_rates(lrs))
        best_params, full_p_drop, full_lr_scale = net.state()  # copies: the best weights so far
        best = torch.full((K,), math.inf)
        best_step = np.zeros(K, dtype=int)
        stale = np.zeros(K, dtype=int)
        active = np.arange(K)  # original index of each configuration still in the batch
        m = xa.shape[0]
        bar = tqdm(total=self.max_steps, desc=f"LMVE {phase}", disable=not self.progress, leave=False)
        step = 0
        for step in range(1, self.max_steps + 1):
            net.train()
            if batch >= m:
                xb, yb = xa, ya
            else:
                idx = torch.randint(0, m, (batch,), generator=gen).to(xa.device)
                xb, yb = xa[idx], ya[idx]
            loss = loss_fn(xb, yb)
            opt.zero_grad(set_to_none=True)
            loss.sum().backward()  # configurations are independent: the sum's gradient splits
            opt.step()
            bar.update(1)
            if step % self.eval_every and step != self.max_steps:
                continue
            net.eval()
            with torch.no_grad():
                held = (held_fn or loss_fn)(xv, yv).detach().cpu()
            held = torch.where(torch.isfinite(held), held, torch.full_like(held, math.inf))
            best_a = best[active]
            threshold = torch.where(torch.isfinite(best_a), best_a - _REL_TOL * best_a.abs(), best_a)
            improved = (held < threshold).numpy()
            if improved.any():
                rows = active[improved]
                best[rows] = held[improved]
                best_step[rows] = step
                sel = torch.as_tensor(improved, device=full_p_drop.device)
                with torch.no_grad():
                    for bp, p in zip(best_params, net.parameters()):
                        bp[torch.as_tensor(rows, device=bp.device)] = p[sel]
            stale[active] = np.where(improved, 0, stale[active] + 1)
            bar.set_postfix(heldout=f"{float(best.min()):.4g}", active=len(active))
            if self.patience is None:
                continue
            keep = stale[active] < self.patience
            if not keep.any():
                break
            if self.retire and not keep.all():
                opt = net.select_(torch.as_tensor(np.flatnonzero(keep), device=full_p_drop.device), opt)
                active = active[keep]
        bar.close()
        net.restore(best_params, full_p_drop, full_lr_scale)
        return step, best_step

    # ------------------------------------------------------------------ predict
    def _numpy_layers(self):
        """The chosen net as float64 numpy arrays, extracted once per net: the layers' ``(W, b)``,
        the input box ``(low, high)`` (``None``: no clipping), and ``(k, K)`` such that the shape is
        ``k F + K``: ``C = (1 - w)(s^2 F + eps I) + w G`` folded into one scale and one constant."""
        cache = getattr(self, "_np_cache", None)
        if cache is None or cache[0] is not self.net_:
            layers = [(lay.weight.detach().double().cpu().numpy().T.copy(), lay.bias.detach().double().cpu().numpy())
                      for lay in self.net_.layers]
            low = self.net_.input_low.detach().double().cpu().numpy()
            high = self.net_.input_high.detach().double().cpu().numpy()
            box = (low, high) if np.isfinite(low).any() or np.isfinite(high).any() else None
            w = float(self.net_.floor_weight)
            K = self.eps * np.eye(self.n_targets_)
            if w:
                K = (1.0 - w) * K + w * self.net_.floor_shape.detach().double().cpu().numpy()
            self._np_cache = cache = (self.net_, layers, box, (1.0 - w) * self.target_scale_**2, K)
        return cache[1:]

    def predict_shape(self, X) -> np.ndarray:
        """(N, n, n) shapes ``(1 - w)(s^2 F(x) + eps I) + w G`` (float64), ``F = R^T R`` or ``L L^T``.

        Evaluated in numpy from weights extracted once: for serving batches of 1 to a few
        thousand rows this avoids torch's per-call dispatch, and it is float64 throughout.
        """
        X = self._validate_predict(X)
        layers, box, k, K = self._numpy_layers()
        h = X if box is None else np.minimum(np.maximum(X, box[0]), box[1])  # np.clip, without its wrapper
        for i, (W, b) in enumerate(layers):
            h = h @ W
            h += b
            if i < len(layers) - 1:
                np.maximum(h, 0.0, out=h)
        n = self.n_targets_
        out = h.reshape(X.shape[0], n, n)
        if self.net_.output == "gram":
            C = np.matmul(out.transpose(0, 2, 1), out)
        else:
            L = np.tril(out, k=-1)
            idx = np.arange(n)
            L[:, idx, idx] = np.logaddexp(0.0, out[:, idx, idx])  # softplus
            C = L @ np.transpose(L, (0, 2, 1))
        C *= k
        C += K
        return C

    @classmethod
    def from_state_dict(cls, state_dict, *, n_features: int, n_targets: int, n_layers: int,
                        eps: float, target_scale: float, config: dict | None = None, output: str = "gram"):
        """Rebuild a fitted estimator from a stored ``state_dict`` (bundle loading)."""
        est = cls(eps=eps, n_layers=n_layers, output=output)
        est.n_features_in_, est.n_targets_ = int(n_features), int(n_targets)
        net = ShapeNet(est.n_features_in_, est.n_targets_, est._hidden(est.n_features_in_), output)
        state_dict = dict(state_dict)
        for key in ("input_low", "input_high", "floor_weight", "floor_shape"):  # older bundles: none
            state_dict.setdefault(key, getattr(net, key))
        net.load_state_dict(state_dict)
        est.net_ = net.eval()
        est.target_scale_ = float(target_scale)
        est.config_ = LMVEConfig(**config) if config else None
        return est
