"""How the calibration rows are drawn and scored: the split protocols (:mod:`~training.calibration.splits`),
a small survey's cross-fit over positions (:mod:`~training.calibration.cross_fit`) and calibration across units
(:mod:`~training.calibration.across`)."""
