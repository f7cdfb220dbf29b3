"""The offline accuracy suite: long-context tasks generated from a seed, their runner, and the
measuring calls behind `lazymlx eval` and `lazymlx calibrate` (evaluation.evaluate_model,
calibration.calibrate_model)."""
