"""Lockstep training of a grid of small torch networks: ``K`` configurations as one batched model.

Every layer of :class:`BatchedMLP` is one ``(K, in, out)`` tensor, so one forward/backward and
one Adam step serve all ``K`` configurations; each keeps its own learning rate and dropout.
:func:`run_phase` trains such a model on any per-configuration loss, scores every configuration
on held-out rows every ``eval_every`` steps, keeps each configuration's best weights, and stops
when none has improved for ``patience`` evaluations, on the threads :func:`models.nn.threads.fit_threads`
gives its step's size. Nothing here is specific to one model:
a torch model of the project builds its networks as a :class:`BatchedMLP` and its losses as
functions of the network's output.

This module imports torch; the serving path never imports it.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from models.exceptions import InputError

#: a held-out score must improve by this relative amount to count as an improvement
REL_TOL = 1e-4


def resolve_device(device: str | None) -> torch.device:
    """``"auto"``/``None`` -> CUDA when present, else CPU; otherwise ``torch.device(device)``."""
    if device in (None, "auto"):
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        dev = torch.device(device)
    except RuntimeError as exc:
        raise InputError(f"device must be 'auto', 'cpu' or 'cuda[:i]'; got {device!r} ({exc})", field="device",
                         expected="'auto', 'cpu' or 'cuda[:i]'", received=repr(device)) from None
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise InputError(f"device {device!r} was asked for but CUDA is not available on this machine",
                         field="device", expected="a device present on this machine", received=repr(device))
    return dev


def bf16_matrix_units(flags) -> bool:
    """Whether CPU ``flags`` (``/proc/cpuinfo``'s words) name bf16 matrix units: ``amx_bf16``."""
    return "amx_bf16" in set(flags)


def cpu_has_native_bf16() -> bool:
    """Whether this CPU has bf16 matrix units (``amx_bf16`` in ``/proc/cpuinfo``); ``False`` where that
    file is absent (not Linux). ``avx512_bf16`` alone does not count: without matrix
    units torch's bf16 products run slower than float32's."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    return bf16_matrix_units(line.split(":", 1)[1].split())
    except OSError:
        pass
    return False


#: the values of ``precision``
PRECISIONS = ("auto", "float32", "bfloat16")


def resolve_precision(precision: str, device: torch.device) -> torch.dtype | None:
    """The autocast dtype of the forward passes, or ``None`` for float32 throughout.

    ``"auto"``: bfloat16 where the device computes it natively (a CPU with ``amx_bf16``, a CUDA device
    with bf16 support), float32 elsewhere. Losses, optimiser state and weights stay float32.
    """
    if precision not in PRECISIONS:
        raise InputError(f"precision must be one of {', '.join(PRECISIONS)}; got {precision!r}", field="precision",
                         expected=" or ".join(PRECISIONS), received=repr(precision))
    if precision == "float32":
        return None
    if precision == "bfloat16":
        return torch.bfloat16
    native = torch.cuda.is_bf16_supported() if device.type == "cuda" else cpu_has_native_bf16()
    return torch.bfloat16 if native else None


def weight_count(widths: list[int]) -> int:
    """Multiply-adds per row of one network of layer ``widths`` (its weights, biases aside)."""
    return sum(a * b for a, b in zip(widths[:-1], widths[1:]))


class BatchedMLP(nn.Module):
    """``K`` independent ReLU MLPs evaluated in one pass: ``x (B, d) -> (K, B, widths[-1])``.

    Dropout (rate ``dropouts[k]`` for network ``k``) follows every hidden ReLU in training mode.
    Each configuration trains at its own learning rate through a reparametrisation: the weights
    are ``W_k = c_k V_k`` and one Adam at ``lr_base`` updates ``V``; since Adam's step is invariant
    to the gradient's scale, the step on ``W_k`` is that of Adam at ``lr_k = c_k lr_base``.
    """

    def __init__(self, widths: list[int], dropouts: list[float], generator: torch.Generator):
        super().__init__()
        self.widths = list(widths)
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

    def gather(self, index: list[int], dropouts: list[float]) -> "BatchedMLP":
        """A new batched net whose configuration ``k`` starts from this net's ``index[k]``."""
        new = BatchedMLP(self.widths, dropouts, torch.Generator().manual_seed(0)).to(self.lr_scale.device)
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
        """Keep only configurations ``keep`` (in place); return an optimizer over the kept ones whose
        Adam moments are sliced to match, so they continue exactly as in the full batch."""
        old = list(self.parameters())
        self.restore([p.detach()[keep] for p in old], self.p_drop[keep], self.lr_scale[keep])
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

    def numpy_layers(self, k: int) -> list[tuple[np.ndarray, np.ndarray]]:
        """Network ``k``'s layers as float64 ``(W (in, out), b (out,))`` arrays (for numpy inference)."""
        out = []
        for i in range(len(self.V)):
            W, b = self.layer(i)
            out.append((W[k].detach().double().cpu().numpy().copy(), b[k, 0].detach().double().cpu().numpy().copy()))
        return out

    def _dropout_mask(self, u: torch.Tensor, dtype: torch.dtype, rates: list[float] | None = None) -> torch.Tensor:
        """The (K, B, H) dropout multipliers from one uniform draw ``u`` (B, H) shared by the
        configurations: ``[u < keep_k] / keep_k`` (each still exact Bernoulli(keep_k) dropout, with K
        times fewer random numbers); ``rates`` (keep probabilities, CPU only) gives them for other
        configurations than the net's. On the CPU one mask per distinct rate, stacked: the same values
        as broadcasting ``u`` against the (K, 1, 1) rates, at less cost on torch's CPU kernels."""
        keep = 1.0 - self.p_drop[:, 0, 0]
        if keep.device.type != "cpu":  # one broadcast kernel; reading the rates would wait on the device
            return (u < keep[:, None, None]).to(dtype).mul_(1.0 / keep[:, None, None])
        rates = keep.tolist() if rates is None else rates
        keep = torch.tensor(rates, dtype=torch.float32)
        masks: dict[float, torch.Tensor] = {}
        for k, rate in enumerate(rates):
            if rate not in masks:
                masks[rate] = (u < keep[k]).to(dtype).mul_(1.0 / keep[k])
        return torch.stack([masks[rate] for rate in rates])

    def _dropout(self, h: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
        """``h`` (K, B, H) times the dropout multipliers of :meth:`_dropout_mask` from the draw ``u`` (B, H).

        On the CPU, when the rates repeat with a period ``P`` (the grid's order: the dropout is its last axis),
        ``h`` is taken as (K / P, P, B, H) and multiplied by the ``P`` distinct masks broadcast: the same values
        without stacking K masks."""
        K = h.shape[0]
        if h.device.type == "cpu":
            rates = (1.0 - self.p_drop[:, 0, 0]).tolist()
            period = next(P for P in range(1, K + 1) if K % P == 0 and all(rates[k] == rates[k % P] for k in range(K)))
            if period < K:
                masks = self._dropout_mask(u, h.dtype, rates[:period])
                return (h.view(K // period, period, *h.shape[1:]) * masks).view(h.shape)
        return h * self._dropout_mask(u, h.dtype)

    def forward(self, x: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
        W, b = self.layer(0)
        # matmul broadcasts x over the K networks, at the same values as einsum("bd,kdh->kbh") and faster. With more rows than
        # twice the features, the bias goes in as one more input column, (B, d + 1) @ (K, d + 1, h): no (K, B, h)
        # sum forward nor reduction backward, for a copy of the (K, d, h) weights (the larger with few rows)
        if x.shape[0] > 2 * x.shape[1]:
            h = torch.matmul(torch.cat([x, x.new_ones(x.shape[0], 1)], dim=1), torch.cat([W, b], dim=1))
        else:
            h = torch.matmul(x, W) + b
        for i in range(1, len(self.V)):
            h = torch.relu(h)
            if self.training:
                u = torch.rand(h.shape[1:], generator=generator, device=h.device)
                h = self._dropout(h, u)
            W, b = self.layer(i)
            h = torch.baddbmm(b, h, W)
        return h


def adam(params, lr: float) -> torch.optim.Optimizer:
    """Adam, fused where this torch build supports it on the parameters' device."""
    params = list(params)
    try:
        return torch.optim.Adam(params, lr=lr, fused=True)
    except (RuntimeError, TypeError):
        return torch.optim.Adam(params, lr=lr)


@dataclass(frozen=True)
class Schedule:
    """How long and on what a phase trains: step cap, evaluation period, patience, mini-batch rows.

    ``halve_every``: every this many evaluations, the worse half of the configurations still in the
    batch (by their best held-out score so far) leaves it, down to one (successive halving).
    ``dtype``: the autocast dtype of the forward passes (``None``: float32). ``tol``: the relative
    improvement of a held-out score that counts as one.
    """

    max_steps: int
    eval_every: int
    patience: int | None
    batch_size: int
    retire: bool = False
    progress: bool = False
    halve_every: int | None = None
    dtype: torch.dtype | None = None
    tol: float = REL_TOL


@dataclass(frozen=True)
class PhaseResult:
    steps: int              # optimiser steps run
    best_step: np.ndarray   # (K,) the step of each configuration's kept weights
    seconds: float
    left_at: np.ndarray     # (K,) the last step each configuration trained (it left the batch after it)
    threads: int = 1        # torch's intra-op threads during the phase (models.nn.threads)


#: a loss maps the network's output (K, B, out) and the batch targets to per-configuration values (K,)
Loss = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


def run_phase(net: BatchedMLP, lrs: list[float], loss: Loss, train: tuple[torch.Tensor, torch.Tensor],
              held: tuple[torch.Tensor, torch.Tensor], schedule: Schedule, generator: torch.Generator,
              dropout_generator: torch.Generator | None = None, held_score: Loss | None = None,
              desc: str = "train") -> PhaseResult:
    """Adam over all configurations at once; early stopping and best weights per configuration.

    Every ``eval_every`` steps each configuration is scored on the held-out rows (``held_score``,
    default ``loss``); it keeps the weights of its best score. The phase ends once no configuration
    has improved for ``patience`` evaluations (``None``: never early), or after ``max_steps``. With
    ``schedule.retire``, a configuration that has stalled that long leaves the batch at once (its
    best weights kept); with ``schedule.halve_every``, the worse half leaves at every rung. The
    mini-batches and dropout draws do not depend on how many remain. Forward passes run under
    autocast to ``schedule.dtype`` when set; the loss sees float32. On return ``net`` holds every
    configuration's best weights. The phase runs on :func:`models.nn.threads.fit_threads` threads for its
    step's multiply-adds (configurations x batch rows x weights), torch's count restored after it.
    """
    from models.nn.threads import ContentionGuard, fit_threads, torch_threads

    rows = min(schedule.batch_size, train[0].shape[0])
    macs = net.n_configs * rows * weight_count(net.widths)
    with torch_threads(fit_threads(macs)) as threads:
        return _run_phase(net, lrs, loss, train, held, schedule, generator, dropout_generator, held_score, desc,
                          ContentionGuard(threads))


def _run_phase(net, lrs, loss, train, held, schedule, generator, dropout_generator, held_score, desc,
               guard) -> PhaseResult:
    from tqdm.auto import tqdm

    t0 = time.perf_counter()
    x_all, y_all = train
    x_held, y_held = held
    score = held_score or loss
    K = net.n_configs
    opt = adam(net.parameters(), net.set_learning_rates(lrs))
    best_params, full_p_drop, full_lr_scale = net.state()
    best = torch.full((K,), math.inf)
    best_step = np.zeros(K, dtype=int)
    stale = np.zeros(K, dtype=int)
    active = np.arange(K)  # original index of each configuration still in the batch
    left_at = np.zeros(K, dtype=int)
    m = x_all.shape[0]
    autocast = torch.autocast(x_all.device.type, dtype=schedule.dtype or torch.bfloat16,
                              enabled=schedule.dtype is not None)
    evals = 0
    bar = tqdm(total=schedule.max_steps, desc=desc, disable=not schedule.progress, leave=False)
    step = 0
    guard.resume(0)
    for step in range(1, schedule.max_steps + 1):
        net.train()
        if schedule.batch_size >= m:
            xb, yb = x_all, y_all
        else:
            idx = torch.randint(0, m, (schedule.batch_size,), generator=generator).to(x_all.device)
            xb, yb = x_all[idx], y_all[idx]
        with autocast:
            out = net(xb, dropout_generator)
        value = loss(out.float(), yb)
        opt.zero_grad(set_to_none=True)
        value.sum().backward()  # configurations are independent: the sum's gradient splits
        opt.step()
        bar.update(1)
        if step % schedule.eval_every and step != schedule.max_steps:
            continue
        guard.steps_done(step)
        net.eval()
        evals += 1
        with torch.no_grad(), autocast:
            out = net(x_held)
        with torch.no_grad():
            h = score(out.float(), y_held).detach().cpu()
        h = torch.where(torch.isfinite(h), h, torch.full_like(h, math.inf))
        best_a = best[active]
        threshold = torch.where(torch.isfinite(best_a), best_a - schedule.tol * best_a.abs(), best_a)
        improved = (h < threshold).numpy()
        if improved.any():
            rows = active[improved]
            best[rows] = h[improved]
            best_step[rows] = step
            sel = torch.as_tensor(improved, device=full_p_drop.device)
            with torch.no_grad():
                for bp, p in zip(best_params, net.parameters()):
                    bp[torch.as_tensor(rows, device=bp.device)] = p[sel]
        stale[active] = np.where(improved, 0, stale[active] + 1)
        bar.set_postfix(heldout=f"{float(best.min()):.4g}", active=len(active))
        keep = _still_training(schedule, best, stale, active, evals)
        if keep is None:
            break
        if not keep.all():
            left_at[active[~keep]] = step
            opt = net.select_(torch.as_tensor(np.flatnonzero(keep), device=full_p_drop.device), opt)
            active = active[keep]
        guard.resume(step)
    bar.close()
    left_at[active] = step
    net.restore(best_params, full_p_drop, full_lr_scale)
    return PhaseResult(steps=step, best_step=best_step, seconds=time.perf_counter() - t0, left_at=left_at,
                       threads=guard.threads)


def _still_training(schedule, best: torch.Tensor, stale: np.ndarray, active: np.ndarray, evals: int):
    """After an evaluation, which ``active`` configurations go on (a boolean mask), or ``None`` when the
    phase stops: every one stalled for ``patience`` evaluations, or the halving left none. A stalled one
    retires (``retire``); every ``halve_every`` evaluations the worse half by best held-out score leaves."""
    keep = np.ones(len(active), dtype=bool)
    if schedule.patience is not None:
        improving = stale[active] < schedule.patience
        if not improving.any():
            return None
        if schedule.retire:
            keep = improving
    if schedule.halve_every and evals % schedule.halve_every == 0 and len(active) > 1:
        # rank by best held-out score (never improved: inf, last); the worse half leaves
        order = np.argsort(best[active].numpy(), kind="stable")
        keep &= np.isin(np.arange(len(active)), order[: math.ceil(len(active) / 2)])
        if not keep.any():  # the better half has stalled and retired: nothing is left to train
            return None
    return keep
