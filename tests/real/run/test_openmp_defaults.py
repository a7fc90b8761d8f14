"""The OpenMP wait policy every entry point runs under (real.OPENMP_DEFAULTS), set before torch loads."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from real import OPENMP_DEFAULTS, openmp_label

SHOW = "import os; print(os.environ.get('OMP_WAIT_POLICY'), os.environ.get('GOMP_SPINCOUNT'))"


def _clean_env(**extra: str) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in OPENMP_DEFAULTS}
    return {**env, **extra}


@pytest.mark.parametrize("entry", ["hetspec", "real", "real.run.bench"])
def test_every_entry_point_sets_the_policy_before_torch(entry):
    out = subprocess.run([sys.executable, "-c", f"import {entry}, sys; assert 'torch' not in sys.modules "
                          f"or '{entry}' == 'real.run.bench'; {SHOW}"],
                         env=_clean_env(), capture_output=True, text=True, check=True).stdout.split()
    assert out == ["PASSIVE", "10000"]


def test_a_value_the_user_sets_wins():
    out = subprocess.run([sys.executable, "-c", f"import hetspec; {SHOW}"], capture_output=True, text=True,
                         env=_clean_env(OMP_WAIT_POLICY="ACTIVE", GOMP_SPINCOUNT="0"), check=True).stdout.split()
    assert out == ["ACTIVE", "0"]


def test_the_label_written_into_calibrations_and_reports():
    assert openmp_label({"omp_wait_policy": "PASSIVE", "gomp_spincount": "10000"}) == \
        "OMP_WAIT_POLICY=PASSIVE, GOMP_SPINCOUNT=10000"
    assert openmp_label({"omp_wait_policy": ""}) == "OMP_WAIT_POLICY=unset"
