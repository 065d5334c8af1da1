"""Reading the reference fixtures and comparing against them (no pytest needed)."""

import json
import os
import struct

import numpy as np

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
