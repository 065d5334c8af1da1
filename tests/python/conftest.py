"""Shared fixtures: where the reference fixtures are, the tiny frames, the tiny engine."""

import os

import pytest

# OpenMP threads spin while they wait by default; on a machine shared with other jobs (CI) that
# makes the CPU backend many times slower. Read when the module loads, so set before importing.
os.environ.setdefault("OMP_WAIT_POLICY", "passive")

import lingbot_map as lm  # noqa: E402
from reference import fixtures_dir  # noqa: E402


@pytest.fixture(scope="session")
def fixtures():
    d = fixtures_dir()
    if not d or not os.path.isdir(os.path.join(d, "tiny")):
        pytest.skip("reference fixtures not found (set LINGBOT_FIXTURES)")
    return d


@pytest.fixture(scope="session")
def tiny_frames(fixtures):
    """The tiny fixture's 16 frames as model input, float32 [16, 3, 56, 70]."""
    return lm.load_images(os.path.join(fixtures, "tiny", "frames"), mode="none")


# LINGBOT_DEVICE=cuda runs the same tests on the GPU, in float32 (1e-3, fixtures README).
DEVICE = os.environ.get("LINGBOT_DEVICE", "cpu")
TOL = 1e-4 if DEVICE == "cpu" else 1e-3


@pytest.fixture(scope="session")
def tiny_engine():
    return lm.Engine("synthetic:1", arch="tiny", device=DEVICE, precision="f32")


@pytest.fixture(scope="session")
def cli():
    """The lingbot-map program of the same build (LINGBOT_CLI, or build/lingbot-map)."""
    path = os.environ.get("LINGBOT_CLI") or os.path.join(os.path.dirname(__file__), "..", "..",
                                                         "build", "lingbot-map")
    if not os.path.exists(path):
        pytest.skip("the lingbot-map program is not built")
    return path
