"""A small sky segmentation model with the reference skyseg.onnx's contract, and what it should
give, computed here with numpy from the definitions of its operations.

    python3 sky_model.py OUTDIR

writes OUTDIR/sky.onnx (input [1, 3, 320, 320], output [1, 1, 320, 320]: a 3x3 convolution to two
channels, their mean, a sigmoid, with fixed weights), OUTDIR/scene.npy (a 640x640 frame, float32
[3, H, W] = byte / 255, a blue sky over brown ground, constant over 2x2 blocks so that halving it
is exact) and OUTDIR/expected.npy (float32 [H, W]: 1 = kept, 0 = sky, 0.5 = too close to call
in float32). The test (tests/unit/sky_mask_test.cpp) runs sky.onnx through the engine's sky
masking and compares with expected.npy.

The expectation follows the contract step by step: halve the frame (exact for 2x2 blocks),
x / 255, minus the ImageNet mean, over its deviation; the graph; stretch to 0..255 and truncate;
double back to 640 bilinearly. A doubled pixel is 0 only where every source pixel with weight in
it is 0; a source value of at least 33 makes it non-zero whatever the rounding.
"""

import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

SIZE = 320
MEAN = np.array([0.485, 0.456, 0.406], np.float32)
STD = np.array([0.229, 0.224, 0.225], np.float32)


def weights():
    rng = np.random.default_rng(56)
    w = np.zeros((2, 3, 3, 3), np.float32)
    w[0, 0] = -4.0  # blue minus red over the 3x3 neighbourhood: steep, so both ends saturate
    w[0, 2] = 4.0
    w[1] = rng.normal(0.0, 0.5, (3, 3, 3)).astype(np.float32)
    b = np.array([1.0, -1.0], np.float32)
    return w, b


def model():
    w, b = weights()
    nodes = [
        helper.make_node("Conv", ["image", "w", "b"], ["features"], pads=[1, 1, 1, 1],
                         kernel_shape=[3, 3]),
        helper.make_node("ReduceMean", ["features"], ["mean"], axes=[1], keepdims=1),
        helper.make_node("Sigmoid", ["mean"], ["sky"]),
    ]
    graph = helper.make_graph(
        nodes, "sky", [helper.make_tensor_value_info("image", TensorProto.FLOAT, [1, 3, SIZE, SIZE])],
        [helper.make_tensor_value_info("sky", TensorProto.FLOAT, [1, 1, SIZE, SIZE])],
        initializer=[numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")])
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 11)])
    m.ir_version = 6
    onnx.checker.check_model(m)
    return m


def scene():
    """uint8 [640, 640, 3]: rows of blocks 0..139 sky, the rest ground, each block's colour
    drawn around its region's."""
    rng = np.random.default_rng(7)
    blocks = np.empty((SIZE, SIZE, 3), np.int64)
    sky = np.array([90, 150, 230])
    ground = np.array([140, 110, 70])
    blocks[:140] = sky + rng.integers(-20, 21, (140, SIZE, 3))
    blocks[140:] = ground + rng.integers(-20, 21, (SIZE - 140, SIZE, 3))
    blocks = blocks.clip(0, 255).astype(np.uint8)
    return blocks.repeat(2, axis=0).repeat(2, axis=1)


def conv3x3(x, w, b):
    """x [3, H, W] float64, zero padding 1: [2, H, W]."""
    c, h, wd = x.shape
    p = np.zeros((c, h + 2, wd + 2))
    p[:, 1:-1, 1:-1] = x
    out = np.zeros((w.shape[0], h, wd))
    for o in range(w.shape[0]):
        acc = np.full((h, wd), float(b[o]))
        for i in range(c):
            for dy in range(3):
                for dx in range(3):
                    acc += float(w[o, i, dy, dx]) * p[i, dy:dy + h, dx:dx + wd]
        out[o] = acc
    return out


def expected(frame):
    """frame uint8 [640, 640, 3] -> float32 [640, 640]: 1 kept, 0 sky, 0.5 uncertain."""
    small = frame[::2, ::2].astype(np.float32)  # halving a frame of 2x2 blocks
    x = ((small / np.float32(255.0) - MEAN) / STD).transpose(2, 0, 1).astype(np.float64)
    w, b = weights()
    score = 1.0 / (1.0 + np.exp(-conv3x3(x, w, b).mean(axis=0)))
    stretched = (score - score.min()) / max(score.max() - score.min(), 1e-8) * 255.0
    # Per source pixel: 0 surely zero after truncation, 2 surely >= 33, 1 in between.
    state = np.where(stretched < 0.99, 0, np.where(stretched >= 33.0, 2, 1))
    # Doubling with half-pixel centres: output i reads source floor((i - 1) / 2) and the next
    # (0.75 / 0.25 weights), clamped at the borders to the edge pixel alone.
    i = np.arange(2 * SIZE)
    lo = np.floor((i + 0.5) / 2 - 0.5).astype(np.int64)
    first = np.clip(lo, 0, SIZE - 1)
    second = np.where((lo < 0) | (lo >= SIZE - 1), first, lo + 1)
    worst = np.maximum.reduce([state[np.ix_(r, c)] for r in (first, second)
                               for c in (first, second)])
    out = np.where(worst == 0, 1.0, np.where(worst == 2, 0.0, 0.5)).astype(np.float32)
    return out


def main(outdir):
    onnx.save(model(), f"{outdir}/sky.onnx")
    frame = scene()
    np.save(f"{outdir}/scene.npy",
            (frame.astype(np.float32) / np.float32(255.0)).transpose(2, 0, 1).copy())
    np.save(f"{outdir}/expected.npy", expected(frame))


if __name__ == "__main__":
    main(sys.argv[1])
