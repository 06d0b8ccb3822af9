"""Test lanes.

* ``pytest -m gpu`` is the device lane: it cannot pass by skipping. Every
  selected test needs a usable GPU; on a machine without one each fails with
  the reason, instead of being skipped.
* Under ``CI=true`` the tests that run the CUDA kernels in Numba's simulator
  fail when the simulator is missing, instead of skipping
  (``test_gpu_backend.run_simulated``), and the test that compiles every
  kernel for sm_90 fails when NVVM is missing (``test_ptx``).
"""
from __future__ import annotations

import pytest


def _gpu_lane(config) -> bool:
    expr = (config.getoption("-m", default="") or "").replace("(", " ").replace(")", " ")
    words = expr.split()
    return "gpu" in words and not any(a == "not" and b == "gpu"
                                      for a, b in zip(words, words[1:]))


def pytest_collection_modifyitems(config, items):
    if not _gpu_lane(config):
        return
    from gpu_dedup.backend_gpu import probe
    usable, why = probe()
    if usable:
        return
    for item in items:
        if item.get_closest_marker("gpu") is None:
            continue
        # a skip because there is no GPU would pass the lane: make it fail instead
        item.own_markers = [m for m in item.own_markers if m.name not in ("skip", "skipif")]
        item.add_marker(pytest.mark.usefixtures("_no_gpu_fails"))
        item.user_properties.append(("gpu_lane_failure", why))


@pytest.fixture
def _no_gpu_fails(request):
    why = dict(request.node.user_properties).get("gpu_lane_failure", "no usable GPU")
    pytest.fail(f"the gpu lane needs a usable GPU: {why}", pytrace=False)
