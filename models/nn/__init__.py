"""Small neural-network helpers shared by the centres and the shape methods.

:mod:`models.nn.lockstep` trains a grid of MLPs as one batched torch network (training only: it
imports torch); :mod:`models.nn.numpy_mlp` evaluates a fitted MLP's weight arrays in numpy (serving).
"""
