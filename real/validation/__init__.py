"""Setting the simulator against real runs: calibration of this machine into a platform,
micro-benchmarks, prediction of a real configuration with the simulator, the validation grid and
its measurement, metrics, reports and plots, and the heterogeneous experiments (one module each).

Only this package (and the CLI) prices real configurations with the simulator; nothing else in
``real`` imports it."""
