"""What the notebooks read of a calibration (``notebooks/host_calibration.ipynb``): the calibrated host with its
raw measurements, or a short glance where there is none yet, and its GEMM measurements as a table."""

from __future__ import annotations

from pathlib import Path

from hwmodels.platform import Platform
from real.validation.calibration.budget import QUICK_BUDGET_S, Budget
from real.validation.calibration.calibrate import calibrate, default_out, load_raw
from real.validation.calibration.host_facts import HOST_NAME, Settings, raw_path

#: A short measurement (three token counts, one small shape, probe decode loops of 24 tokens: under a minute
#: on 2 cores) for when no host platform exists yet, e.g. in the test suite: enough to draw the plots, not to
#: validate with.
GLANCE = Settings(m_values=(1, 16, 64), shapes=((256, 256),), repeats=2, warmup=1,
                  dram_working_set_bytes=48 * 2**20, cold_pool_bytes=48 * 2**20, overhead_repeats=2, loop_repeats=1,
                  loop_new_tokens=24, label="glance", dtype_m_values=(1, 16), dtype_shapes=((256, 256),))


def host_calibration(platform_path: str | Path | None = None) -> tuple[Platform, dict, str]:
    """The calibrated host and its raw measurements, or, if there is none yet, a short
    :data:`GLANCE` measurement in a temporary folder. Returns ``(platform, raw, where)``."""
    import tempfile

    from hwmodels.loader import load_platform_file

    path = Path(platform_path) if platform_path is not None else default_out()
    if path.exists() and raw_path(path).exists():
        return load_platform_file(path), load_raw(path), str(path)
    tmp = Path(tempfile.mkdtemp(prefix="hetspec-glance-")) / f"{HOST_NAME}.toml"
    platform, path, _ = calibrate(tmp, progress=False, settings=GLANCE, budget=Budget(QUICK_BUDGET_S))
    return platform, load_raw(path), f"{path} (a quick glance: no calibrated host yet, run `hetspec calibrate`)"


def gemm_table(raw: dict):
    """Every GEMM measurement of a calibration as a DataFrame: threads, warm/cold, M, K, N, GFLOP/s,
    arithmetic intensity (FLOP per byte moved: activations in and out plus the weight, fp32)."""
    import pandas as pd

    rows = []
    for key in ("all_threads", "one_thread"):
        w = raw[key]
        for state in ("warm", "cold"):
            for p in w[f"gemm_{state}"]:
                nbytes = 4.0 * (p["m"] * p["k"] + p["m"] * p["n"] + p["k"] * p["n"])
                rows.append({"threads": w["threads"], "weights": "in cache" if state == "warm" else "from DRAM",
                             "m": p["m"], "k": p["k"], "n": p["n"], "gflops": p["flops_per_s"] / 1e9,
                             "intensity": 2.0 * p["m"] * p["k"] * p["n"] / nbytes})
    return pd.DataFrame(rows)
