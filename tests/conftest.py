"""GPU marker, poisoned buffers and hypothesis profiles shared by the tests."""

from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, settings

settings.register_profile(
    "ci", derandomize=True, deadline=None, max_examples=25, print_blob=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.register_profile(
    "gpu", deadline=None, max_examples=40, print_blob=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.register_profile(
    "dev", deadline=None, max_examples=10,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci" if os.environ.get("CI") else "gpu"))


def _gpu_missing() -> str | None:
    try:
        import cupy

        count = cupy.cuda.runtime.getDeviceCount()
    except Exception as exc:  # no CuPy, no driver, no device: all mean "no GPU here"
        return f"no CUDA GPU available ({type(exc).__name__}: {exc})"
    if count == 0:
        return "no CUDA GPU available (0 devices)"
    return None


GPU_MISSING = _gpu_missing()


def pytest_configure(config):
    config.addinivalue_line("markers", "gpu: needs a CUDA GPU (skipped without one)")


def pytest_collection_modifyitems(config, items):
    if GPU_MISSING is None:
        return
    if os.environ.get("GDN_KERNELS_REQUIRE_GPU", "0") not in ("", "0"):
        raise pytest.UsageError(f"GDN_KERNELS_REQUIRE_GPU is set but {GPU_MISSING}")
    skip = pytest.mark.skip(reason=f"GPU test skipped: {GPU_MISSING}")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)
