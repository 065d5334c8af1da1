"""Shared fixtures: where the reference fixtures are, a safetensors reader, the tiny engine."""

import json
import os
import struct

import numpy as np
import pytest

# OpenMP threads spin while they wait by default; on a machine shared with other jobs (CI) that
# makes the CPU backend many times slower. Read when the module loads, so set before importing.
os.environ.setdefault("OMP_WAIT_POLICY", "passive")

import lingbot_map as lm  # noqa: E402

DTYPES = {"F32": np.float32, "F16": np.float16, "F64": np.float64, "U8": np.uint8,
          "I64": np.int64, "I32": np.int32, "BOOL": np.bool_}


def fixtures_dir():
    return os.environ.get("LINGBOT_FIXTURES") or os.environ.get("LINGBOT_DEFAULT_FIXTURES", "")


def read_safetensors(path):
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    out = {}
    for name, t in header.items():
        if name == "__metadata__":
            continue
        begin, end = t["data_offsets"]
        raw = np.frombuffer(data, DTYPES[t["dtype"]], offset=8 + n + begin,
                            count=(end - begin) // np.dtype(DTYPES[t["dtype"]]).itemsize)
        out[name] = raw.reshape(t["shape"])
    return out


def relative(got, want):
    """The fixtures' measure: largest absolute error over largest absolute reference value."""
    got = np.asarray(got, np.float64).reshape(-1)
    want = np.asarray(want, np.float64).reshape(-1)
    assert got.shape == want.shape
    scale = np.abs(want).max()
    err = np.abs(got - want).max()
    return err / scale if scale > 0 else err


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
