"""A small ReLU network trained with the project's batched torch trainer (a grid in lockstep, the
best on held-out rows), stored and evaluated as plain weight arrays: serving never imports torch."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from models.centres.base import Centre, target_scaling
from models.exceptions import InputError


@dataclass(eq=False, repr=False)
class MLPCentre(Centre):
    """A ReLU MLP regressing the standardised targets, trained with :mod:`models.nn.lockstep`.

    The grid ``learning_rates x dropouts`` trains in lockstep (one batched network) with Adam on
    the mean squared error, each configuration early-stopped on a held-out ``held_out`` share of
    the training rows (best weights kept); the configuration of smallest held-out error is the
    centre. After fitting it is plain arrays (``coefs_``, ``intercepts_``, the target mean and
    scale) evaluated in numpy by :func:`models.nn.numpy_mlp.mlp_forward`. Fitting needs torch (the
    training install); predicting does not.

    Parameters
    ----------
    hidden : tuple of int
        Hidden widths.
    learning_rates, dropouts : tuple of float
        The grid (every pair trains).
    max_steps, eval_every, patience, batch_size : int
        The schedule (mini-batches of ``batch_size`` rows; full batch when the data is smaller).
    held_out : float
        Share of the training rows held out for early stopping and the choice of configuration.
    seed : int
    device : str
        ``"auto"`` (CUDA when present), ``"cpu"`` or ``"cuda[:i]"``.
    """

    hidden: tuple[int, ...] = (128, 64)
    learning_rates: tuple[float, ...] = (1e-3, 3e-3)
    dropouts: tuple[float, ...] = (0.0, 0.1)
    max_steps: int = 5000
    eval_every: int = 50
    patience: int = 10
    batch_size: int = 256
    held_out: float = 0.1
    seed: int = 0
    device: str = "auto"

    def fit(self, X, Y) -> "MLPCentre":
        X, Y = self._fit_input(X, Y, min_rows=10)
        if not 0.0 < self.held_out < 0.5:
            raise InputError(f"held_out must lie in (0, 0.5); got {self.held_out!r}", field="held_out",
                             expected="a share in (0, 0.5)", received=repr(self.held_out))
        import torch

        from models.nn.lockstep import BatchedMLP, Schedule, resolve_device, run_phase

        dev = resolve_device(self.device)
        self.y_mean_, self.y_scale_ = target_scaling(Y)
        Z = (Y - self.y_mean_) / self.y_scale_
        rng = np.random.default_rng(self.seed)
        perm = rng.permutation(X.shape[0])
        n_held = max(1, int(round(self.held_out * X.shape[0])))
        held, fit = perm[:n_held], perm[n_held:]
        grid = [(lr, p) for lr in self.learning_rates for p in self.dropouts]
        gen = torch.Generator().manual_seed(self.seed)
        net = BatchedMLP([X.shape[1], *self.hidden, Y.shape[1]], [p for _, p in grid], gen).to(dev)

        def t(a):
            return torch.as_tensor(a, dtype=torch.float32, device=dev)

        def mse(out, y):
            return ((out - y) ** 2).mean(dim=(1, 2))

        schedule = Schedule(max_steps=self.max_steps, eval_every=self.eval_every, patience=self.patience,
                            batch_size=self.batch_size)
        dropout_gen = torch.Generator(device=dev).manual_seed(self.seed + 1)
        run_phase(net, [lr for lr, _ in grid], mse, (t(X[fit]), t(Z[fit])), (t(X[held]), t(Z[held])), schedule,
                  torch.Generator(device=dev).manual_seed(self.seed + 2), dropout_gen, desc="mlp centre")
        net.eval()
        with torch.no_grad():
            errors = mse(net(t(X[held])), t(Z[held])).cpu().numpy()
        self.config_index_ = int(np.argmin(errors))
        self.held_out_mse_ = float(errors[self.config_index_])
        layers = net.numpy_layers(self.config_index_)
        self.coefs_, self.intercepts_ = [W for W, _ in layers], [b for _, b in layers]
        return self

    def predict(self, X) -> np.ndarray:
        from models.nn.numpy_mlp import mlp_forward

        return mlp_forward(np.asarray(X, dtype=np.float64), self.coefs_, self.intercepts_) * self.y_scale_ + self.y_mean_

    def to_arrays(self):
        arrays = {"y_mean": self.y_mean_, "y_scale": self.y_scale_}
        for i, (W, b) in enumerate(zip(self.coefs_, self.intercepts_)):
            arrays[f"W{i}"], arrays[f"b{i}"] = W, b
        params = {k: (list(v) if isinstance(v, tuple) else v) for k, v in self.get_params().items()}
        return params, arrays

    @classmethod
    def from_arrays(cls, params, arrays):
        params = {k: (tuple(v) if isinstance(v, list) else v) for k, v in params.items()}
        self = cls(**params)
        n_layers = sum(1 for k in arrays if str(k).startswith("W"))
        self.coefs_ = [np.asarray(arrays[f"W{i}"], float) for i in range(n_layers)]
        self.intercepts_ = [np.asarray(arrays[f"b{i}"], float) for i in range(n_layers)]
        self.y_mean_, self.y_scale_ = np.asarray(arrays["y_mean"], float), np.asarray(arrays["y_scale"], float)
        self.n_features_in_, self.n_targets_ = self.coefs_[0].shape[0], self.coefs_[-1].shape[1]
        return self
