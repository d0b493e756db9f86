"""LMVE's training in torch: the data of one fit, its three phases, and the losses they minimise.

Used only by :meth:`models.shapes.lmve.LMVEShape.fit` (imported there, inside ``fit``), so that
serving, which evaluates LMVE in numpy, never imports torch. The networks are
:class:`~models.nn.lockstep.BatchedMLP` grids trained by :func:`~models.nn.lockstep.run_phase`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np
import torch

from models.calibration.conformal import conformal_quantile, conformal_rank
from models.nn.lockstep import (BatchedMLP, PhaseResult, Schedule, resolve_device, resolve_precision, run_phase,
                                weight_count)
from models.exceptions import InputError
from models.shapes.base import second_moment
from models.shapes.nle import NearestNeighbourEllipsoid

#: up to this many fit rows LMVE trains full-batch in float32, every configuration until it stops;
#: above, the "auto" settings switch to mini-batches of MINIBATCH_ROWS, successive halving every
#: HALVE_EVERY evaluations, retiring stalled configurations, and bf16 where the device has it
FULL_BATCH_ROWS = 4096
#: ... and at most this many multiply-adds per full-batch step of one configuration (fit rows x the network's
#: weights): above, the same "auto" settings, whatever the rows. The small sets of the paper stay below
#: (a hundred columns); a fingerprint survey's fold of a few thousand rows (hundreds of columns) does not
FULL_BATCH_MACS = 50_000_000
MINIBATCH_ROWS = 256
HALVE_EVERY = 4


def mahalanobis_and_sqrt_det(C: torch.Tensor, r: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``r^T C^{-1} r`` and ``det(C)^{1/2}`` for SPD ``C`` (..., n, n) and ``r`` (..., n).

    Closed form for n = 2 (much faster than batched LAPACK calls on a CPU); Cholesky otherwise.
    """
    if C.shape[-1] == 2:
        a, b, c = C[..., 0, 0], C[..., 0, 1], C[..., 1, 1]
        det = a * c - b * b
        r1, r2 = r[..., 0], r[..., 1]
        return (c * r1 * r1 - 2.0 * b * r1 * r2 + a * r2 * r2) / det, torch.sqrt(det)
    L = torch.linalg.cholesky(C)
    z = torch.linalg.solve_triangular(L, r.unsqueeze(-1), upper=False).squeeze(-1)
    return (z * z).sum(-1), torch.diagonal(L, dim1=-2, dim2=-1).prod(-1)


def factor_product(out: torch.Tensor, output: str) -> torch.Tensor:
    """Map the net's ``(..., n, n)`` output to a PSD matrix: ``R^T R`` (``"gram"``, the paper) or
    ``L L^T`` with ``L`` the lower triangle and a softplus on its diagonal (``"cholesky"``)."""
    if output == "gram":
        return out.transpose(-1, -2) @ out
    L = torch.tril(out, diagonal=-1) + torch.diag_embed(torch.nn.functional.softplus(torch.diagonal(out, 0, -2, -1)))
    return L @ L.transpose(-1, -2)


def held_out_rows(m: int, n_val: int, seed: int, groups=None) -> tuple[np.ndarray, np.ndarray]:
    """``(held_out, fit)`` row indices: ``n_val`` random rows, or whole groups in random order until at
    least ``n_val`` rows, passing over a group that would take the slice beyond ``2 n_val`` rows (a
    survey's phones: a few may hold most of its rows), and leaving at least one group to
    fit on. When every group is that large, the smallest is held out alone."""
    rng = np.random.default_rng(seed)
    if groups is None:
        perm = rng.permutation(m)
        return perm[:n_val], perm[n_val:]
    from models.calibration.conformal import group_codes

    codes = group_codes(groups, m)
    order = rng.permutation(int(codes.max()) + 1)
    sizes = np.bincount(codes)
    chosen, total = [], 0
    for g in order[:-1]:  # the last group in the order is never held: one is left to fit on
        if total >= n_val:
            break
        if total + sizes[g] <= 2 * n_val:
            chosen.append(g)
            total += sizes[g]
    if not chosen:
        chosen = [order[:-1][int(np.argmin(sizes[order[:-1]]))]] if len(order) > 1 else [order[0]]
    held = np.isin(codes, chosen)
    return np.flatnonzero(held), np.flatnonzero(~held)


@dataclass
class Candidate:
    """One trained network offered to the selection phase."""

    net: BatchedMLP
    index: int
    config: object  # LMVEConfig
    row: dict       # what grid_results_ reports about it


class LMVEFit:
    """The data and settings of one LMVE fit, and its phases.

    Prepares, from standardised ``X`` (m, d) and residuals ``R`` (m, n): the held-out slice of the
    training rows (never calibration rows), the global residual scale ``s`` (``C = s^2 (F + eps/s^2 I)``
    so that Adam's step sizes mean the same on every dataset), the NLE baseline ``C_B`` fitted and
    calibrated on the fit rows, and the volume weight ``lambda``.
    """

    def __init__(self, est, X: np.ndarray, R: np.ndarray, coverage: float, groups=None):
        self.est, self.coverage = est, coverage
        self.input_box = (X.min(axis=0), X.max(axis=0))
        # columns constant on the fit rows carry nothing the network can learn from: it never sees them
        # (LMVEShape.fit gives them zero first-layer weights)
        self.columns = np.arange(X.shape[1])
        if est.drop_constant:
            varying = np.flatnonzero(self.input_box[1] > self.input_box[0])
            self.columns = varying if varying.size else self.columns
        m, self.d = X.shape[0], len(self.columns)
        self.n = n = R.shape[1]
        self.device = dev = resolve_device(est.device)
        seed = int(est.random_state)
        self.gen = torch.Generator().manual_seed(seed)
        self.dropout_gen = self.gen if dev.type == "cpu" else torch.Generator(device=dev).manual_seed(seed)
        val, fit = held_out_rows(m, est._n_validation(m), seed, groups)

        s = float(np.sqrt(np.mean(R[fit] ** 2)))
        self.scale = s = s if s > 0 else 1.0
        Rs = R / s
        # one copy of the fit rows' columns the networks see, shared by the baseline and the tensors
        X_fit, X_val, R_fit = X[np.ix_(fit, self.columns)], X[np.ix_(val, self.columns)], Rs[fit]
        base = NearestNeighbourEllipsoid().fit(X_fit, R_fit)
        shapes_B = base.predict_parts(X_fit)  # once: the scores and the targets share the fit rows' shapes
        scores_B = base.conformity_scores(X_fit, R_fit, parts=shapes_B)
        alpha_B = conformal_quantile(scores_B, coverage)
        CB_fit = shapes_B[0] * alpha_B
        CB_val = base.predict_shape(X_val) * alpha_B
        del base, shapes_B
        if est.lambda_ == "auto":
            self.lam = float(np.mean(scores_B / alpha_B) / np.mean(np.sqrt(np.linalg.det(CB_fit))))
        else:
            self.lam = float(est.lambda_) * s**n  # a fixed lambda is given in target units

        t = lambda a: torch.as_tensor(a, dtype=torch.float32, device=dev)  # noqa: E731
        self.X_fit, self.X_val, self.R_fit, self.R_val = t(X_fit), t(X_val), t(R_fit), t(Rs[val])
        self.CB_fit, self.CB_val = t(CB_fit), t(CB_val)
        self.eye = torch.eye(n, device=dev) * (est.eps / s**2)
        self.ge_shape = t(second_moment(Rs[fit]))  # GE's shape (internal units), the floor
        self.floor_weight = float(est.floor_weight)
        self.output = est._output()
        self.mean_head = bool(est.mean_head)
        self.widths = [self.d, *est._hidden(self.d), n * n + (n if self.mean_head else 0)]
        self.k_val = conformal_rank(len(val), coverage)
        # "auto" settings: above FULL_BATCH_ROWS fit rows or FULL_BATCH_MACS a full-batch step, mini-batches,
        # successive halving, retiring stalled configurations and bf16 where native; full-batch float32 below
        self.large = large = len(fit) > FULL_BATCH_ROWS or len(fit) * weight_count(self.widths) > FULL_BATCH_MACS
        batch = est.batch_size or (MINIBATCH_ROWS if large else m)
        halve = (HALVE_EVERY if large else None) if est.halve_every == "auto" else est.halve_every
        retire = large if est.retire == "auto" else bool(est.retire)
        self.dtype = resolve_precision(est.precision if est.precision != "auto" or large else "float32", dev)
        self.schedule = Schedule(max_steps=int(est.max_steps), eval_every=int(est.eval_every), patience=est.patience,
                                 batch_size=int(batch), retire=retire, progress=bool(est.progress),
                                 halve_every=halve, dtype=self.dtype, tol=float(est.tol))

    # ------------------------------------------------------------------ the model and its losses
    def shapes(self, out: torch.Tensor) -> torch.Tensor:
        """Net output (K, B, n*n[+n]) -> shapes (K, B, n, n): ``(1 - w)(F + eps I) + w G``."""
        out = out[..., : self.n * self.n].reshape(*out.shape[:-1], self.n, self.n)
        C = factor_product(out, self.output) + self.eye
        w = self.floor_weight
        return C if w == 0.0 else (1.0 - w) * C + w * self.ge_shape

    def _scores(self, out, r):
        """``(M, det(C)^1/2)`` per configuration and row; with a mean head ``M`` is taken about the
        corrected centre: ``r - delta(x)``, ``delta`` the net's last ``n`` outputs."""
        C = self.shapes(out)
        r = r.expand(C.shape[0], *r.shape)
        if self.mean_head:
            r = r - out[..., self.n * self.n:]
        return mahalanobis_and_sqrt_det(C, r)

    def init_loss(self, out, target_shapes):  # (K,) mean squared Frobenius error to C_B
        return ((self.shapes(out) - target_shapes) ** 2).sum((-1, -2)).mean(-1)

    def train_loss(self, out, r):  # (K,)
        M, sd = self._scores(out, r)
        if self.est.loss == "nll":
            return (M + 2.0 * torch.log(sd)).mean(-1)
        if self.est.loss == "volume":
            return 0.5 * self.n * torch.log(torch.quantile(M, self.coverage, dim=-1)) + torch.log(sd.mean(-1))
        return M.mean(-1) + self.lam * sd.mean(-1)

    def heldout_volume(self, out, r):  # (K,) eta-conformal quantile^(n/2) x mean sqrt det
        M, sd = self._scores(out, r)
        if self.k_val > M.shape[-1]:
            return torch.full((M.shape[0],), math.inf, device=M.device)
        return torch.kthvalue(M, self.k_val, dim=-1).values ** (0.5 * self.n) * sd.mean(-1)

    def new_grid(self, dropouts: list[float]) -> BatchedMLP:
        """A batched net for the grid; a mean head's output weights start at zero (the fitted centre)."""
        net = BatchedMLP(self.widths, dropouts, self.gen).to(self.device)
        if self.mean_head:
            with torch.no_grad():
                net.V[-1][..., self.n * self.n:] = 0.0
                net.b[-1][..., self.n * self.n:] = 0.0
        return net

    # ------------------------------------------------------------------ the phases
    def init_phase(self, net: BatchedMLP, lrs: list[float]) -> PhaseResult:
        """Phase 1: regress ``C_theta(x)`` onto the calibrated NLE baseline ``C_B(x)``."""
        steps = self.est.init_steps
        schedule = self.schedule if steps is None else replace(self.schedule, max_steps=min(int(steps),
                                                                                            self.schedule.max_steps))
        return run_phase(net, lrs, self.init_loss, (self.X_fit, self.CB_fit), (self.X_val, self.CB_val),
                         schedule, self.gen, self.dropout_gen, desc="LMVE init")

    def train_phase(self, net: BatchedMLP, lrs: list[float]) -> PhaseResult:
        """Phase 2: minimise the train loss (the paper's ``mean M + lambda mean det(C)^1/2``), stopping
        on the held-out calibrated volume (``stop_on="volume"``) or the held-out loss."""
        held = self.heldout_volume if self.est.stop_on == "volume" else None
        return run_phase(net, lrs, self.train_loss, (self.X_fit, self.R_fit), (self.X_val, self.R_val),
                         self.schedule, self.gen, self.dropout_gen, held_score=held, desc="LMVE train")

    def rank(self, candidates: list[Candidate]) -> list[Candidate]:
        """Phase 3: the candidates of finite calibrated volume on the held-out rows (their conformal
        threshold at ``coverage``, then the mean ``det(alpha C)^{1/2}``, in target units; stored in each
        one's ``row["heldout_volume"]``), smallest first (ties in the given order)."""
        n, s = self.n, self.scale
        by_net: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        for c in candidates:
            if id(c.net) not in by_net:
                c.net.eval()
                with torch.no_grad():
                    M, sd = self._scores(c.net(self.X_val), self.R_val)
                by_net[id(c.net)] = (M.double().cpu().numpy(), sd.double().cpu().numpy())
            M, sd = by_net[id(c.net)]
            ok = np.isfinite(M[c.index]).all() and np.isfinite(sd[c.index]).all()
            aq = conformal_quantile(M[c.index], self.coverage) if ok else math.inf
            c.row["heldout_volume"] = aq ** (n / 2) * float(np.mean(sd[c.index])) * s**n if ok else math.inf
        finite = [c for c in candidates if np.isfinite(c.row["heldout_volume"])]
        if not finite:
            raise InputError("LMVE training diverged for every configuration (non-finite shapes)")
        return sorted(finite, key=lambda c: c.row["heldout_volume"])
