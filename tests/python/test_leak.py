"""A long push loop holds flat memory: 500 frames of the tiny model with bounded caches."""

import os

import numpy as np
import pytest

PAGE = os.sysconf("SC_PAGE_SIZE")


def resident_bytes():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * PAGE


# AddressSanitizer holds freed blocks back (its quarantine) and finds leaks itself.
@pytest.mark.skipif("libasan" in os.environ.get("LD_PRELOAD", ""),
                    reason="resident memory is the sanitizer's under AddressSanitizer")
def test_resident_memory_is_flat_over_500_frames(tiny_engine, tiny_frames):
    # Small frames and one camera iteration keep it fast; float and uint8 frames alternate.
    session = tiny_engine.start(scale_frames=4, window=6, keyframe_interval=2,
                                camera_iterations=1, max_special_frames=8)
    small = np.ascontiguousarray(tiny_frames[:, :, :28, :42])
    frames = list(small) + list(np.round(small * 255).astype(np.uint8).transpose(0, 2, 3, 1))
    delivered, warm = 0, 0
    for i in range(500):
        for r in session.push(frames[i % len(frames)]):
            delivered += 1
            _ = r.depth.sum(), r.c2w, session.cache_stats()
        if i == 100:  # caches full, allocators warm
            warm = resident_bytes()
    delivered += len(session.finish())
    assert delivered == 500
    grown = resident_bytes() - warm
    # A leak of a frame's input or result (5-14 KB) over 400 frames would be 2-6 MB.
    assert grown < 1 * 2**20, f"resident memory grew by {grown / 2**20:.1f} MB"
