"""Every bad input is a Python exception with the engine's one-line message, never a crash."""

import os

import numpy as np
import pytest

import lingbot_map as lm


def test_missing_files_raise_file_not_found(tmp_path):
    with pytest.raises(FileNotFoundError, match="nope.safetensors"):
        lm.Engine(str(tmp_path / "nope.safetensors"))
    with pytest.raises(FileNotFoundError, match="no such file"):
        lm.load_image(tmp_path / "nope.png")
    with pytest.raises(FileNotFoundError, match="no such folder"):
        lm.list_images(tmp_path / "nope")
    with pytest.raises(FileNotFoundError):
        lm.load_images([tmp_path / "nope.jpg"])


def test_damaged_files_raise_runtime_error(tmp_path):
    bad = tmp_path / "bad.safetensors"
    bad.write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00{not json at all")
    with pytest.raises(RuntimeError, match="bad.safetensors"):
        lm.Engine(bad)
    png = tmp_path / "bad.png"
    png.write_bytes(b"\x89PNG\r\n\x1a\n" + b"\x00" * 20)
    with pytest.raises(RuntimeError, match="bad.png"):
        lm.load_image(png)
    with pytest.raises(ValueError, match="is a folder"):
        lm.load_image(tmp_path)


@pytest.mark.parametrize("kwargs", [
    {"device": "tpu"}, {"precision": "f8"}, {"arch": "huge"}, {"precision": "bf16"},
])
def test_bad_engine_options_raise_value_error(kwargs):
    if kwargs.get("precision") == "bf16" and lm.has_cuda:
        pytest.skip("bf16 is valid where there is a GPU")
    with pytest.raises(ValueError):
        lm.Engine("synthetic:1", **{"arch": "tiny", **kwargs})
    with pytest.raises(ValueError, match="numeric seed"):
        lm.Engine("synthetic:x", arch="tiny")


@pytest.mark.parametrize("kwargs", [
    {"scale_frames": 0}, {"window": 0}, {"keyframe_interval": 0}, {"camera_iterations": 0},
    {"flow_threshold": -1.0}, {"flow_threshold": float("nan")}, {"max_special_frames": -1},
    {"max_non_keyframe_gap": 0},
])
def test_bad_stream_options_raise_value_error(tiny_engine, kwargs):
    with pytest.raises(ValueError):
        tiny_engine.start(**kwargs)


@pytest.mark.parametrize("frame", [
    np.zeros((56, 70), np.float32),             # no channels
    np.zeros((4, 56, 70), np.float32),          # four channels
    np.zeros((3, 55, 70), np.float32),          # not a multiple of 14
    np.zeros((3, 0, 70), np.float32),           # empty
    np.zeros((3, 56, 70), np.int16),            # integer, not uint8 HWC
    np.zeros((56, 70, 4), np.uint8),            # RGBA
    "not an image",
])
def test_bad_frames_raise_value_error(tiny_engine, frame):
    with pytest.raises(ValueError):
        tiny_engine.start().push(frame)


def test_a_frame_of_another_size_raises_value_error(tiny_engine, tiny_frames):
    session = tiny_engine.start(scale_frames=2, window=4)
    session.push(tiny_frames[0])
    with pytest.raises(ValueError, match="one size"):
        session.push(np.zeros((3, 42, 70), np.float32))
    assert session.push(tiny_frames[1])  # the session is still usable


def test_bad_arrays_for_the_drivers_raise_value_error(tiny_engine, tiny_frames):
    for images in (tiny_frames[0], tiny_frames[:, :2], tiny_frames[:0], np.zeros((2, 2))):
        with pytest.raises(ValueError):
            tiny_engine.inference_streaming(images)
        with pytest.raises(ValueError):
            tiny_engine.inference_windowed(images)
    with pytest.raises(ValueError, match="overlap"):
        tiny_engine.inference_windowed(tiny_frames, window_size=4, overlap_size=20,
                                       num_scale_frames=4)
    with pytest.raises(ValueError):
        tiny_engine.inference_streaming(tiny_frames, keyframe_interval=0)


def test_bad_preprocessing_raises_value_error(tmp_path):
    image = np.zeros((100, 150, 3), np.uint8)
    with pytest.raises(ValueError, match="mode"):
        lm.preprocess(image, "stretch")
    with pytest.raises(ValueError, match="multiple of the patch size"):
        lm.preprocess(image, "crop", 500)
    with pytest.raises(ValueError, match="multiples of the patch size"):
        lm.preprocess(image, "none")
    with pytest.raises(ValueError):
        lm.preprocess(np.zeros((10, 10), np.uint8))
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError):
        lm.load_images([])


def test_a_run_that_cannot_fit_raises_memory_error(tiny_engine, tiny_frames):
    # Ten million frames (a broadcast view: no memory) whose results cannot be kept.
    images = np.broadcast_to(tiny_frames[:1], (10**7, 3, 56, 70))
    with pytest.raises(MemoryError, match="not enough"):
        tiny_engine.inference_streaming(images)
    with pytest.raises(MemoryError, match="not enough"):
        tiny_engine.inference_windowed(images)


def test_progress_errors_and_interrupts_propagate(tiny_engine, tiny_frames):
    def stop(done, total):
        if done == 5:
            raise KeyboardInterrupt
    with pytest.raises(KeyboardInterrupt):
        tiny_engine.inference_streaming(tiny_frames, num_scale_frames=4, window=6, progress=stop)
