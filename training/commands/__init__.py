"""The ``lmve-*`` training commands, each a module with ``main``: ``lmve-train`` (:mod:`~training.commands.train`,
``--split-by`` through :mod:`~training.commands.sites`), ``lmve-evaluate``, ``lmve-predict``, ``lmve-recalibrate``
and ``lmve-convert-bundle``; what they open (:mod:`~training.commands.inputs`) and what ``lmve-train`` writes
beside a bundle (:mod:`~training.commands.train_report`)."""
