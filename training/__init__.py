"""lmve.training: data, the paper's split protocol, fitting, calibration and bundle writing."""
