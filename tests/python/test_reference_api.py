"""What a reference user tries first: the device default, one image layout across load_image,
preprocess and push, the reference's inference_streaming / clean_kv_cache / get_cache_stats, and
argument errors that describe the argument instead of printing it."""

import os
import subprocess
import sys

import numpy as np
import pytest

import lingbot_map as lm
from conftest import DEVICE

SCALE, WINDOW = 4, 6  # the fixture's streaming settings
ROOT = os.path.join(os.path.dirname(__file__), "..", "..")


def push_all(session, frames):
    results = []
    for f in frames:
        results += session.push(f)
    return results + session.finish()


def assert_same_results(a, b):
    assert len(a) == len(b) > 0
    for x, y in zip(a, b):
        np.testing.assert_array_equal(x.pose_enc, y.pose_enc)
        np.testing.assert_array_equal(x.depth, y.depth)
        np.testing.assert_array_equal(x.confidence, y.confidence)


# --- has_cuda: a usable device, not only a CUDA build ---------------------------------------

def test_has_cuda_means_an_engine_can_be_made_on_the_gpu():
    assert isinstance(lm.has_cuda, bool) and isinstance(lm.cuda_devices, int)
    assert lm.has_cuda == (lm.cuda_devices > 0)
    assert lm.built_with_cuda or not lm.has_cuda
    if lm.has_cuda:
        engine = lm.Engine("synthetic:1", arch="tiny", device="cuda")
        assert not engine.info["backend"].startswith("cpu")
    else:  # what the example's default would have run into
        with pytest.raises((RuntimeError, ValueError)):
            lm.Engine("synthetic:1", arch="tiny", device="cuda")


def test_the_folder_example_runs_with_its_default_device(fixtures, tmp_path):
    # Default --device: "cuda" only where one is usable, so the example runs on any machine.
    env = dict(os.environ, PYTHONPATH=os.path.dirname(os.path.dirname(lm.__file__)),
               MPLBACKEND="Agg")
    out = subprocess.run(
        [sys.executable, os.path.join(ROOT, "examples", "reconstruct_folder.py"),
         os.path.join(fixtures, "tiny", "frames"), "--model", "synthetic:1", "--arch", "tiny",
         "--mode", "none", "--scale-frames", "4", "--window", "6",
         "--plot", str(tmp_path / "plot.png")],
        capture_output=True, text=True, env=env, timeout=300)
    assert out.returncode == 0, out.stderr
    assert "Traceback" not in out.stderr
    assert "16 frames in" in out.stdout
    assert "camera path length:" in out.stdout


# --- one image layout: the output of each function is accepted by the next -------------------

@pytest.fixture(scope="module")
def picture():
    rng = np.random.default_rng(5)
    return rng.integers(0, 256, (100, 150, 3), dtype=np.uint8)


def test_preprocess_takes_every_layout_and_dtype(picture):
    want = lm.preprocess(picture, "crop", 70)
    assert want.dtype == np.uint8 and want.shape == (3, 42, 70)  # width 70, height 100 * 70 / 150 to a multiple of 14
    as_float = picture.astype(np.float32) / np.float32(255)
    for same in (picture.transpose(2, 0, 1),            # uint8 [3, H, W]
                 as_float, as_float.transpose(2, 0, 1),  # float [H, W, 3] and [3, H, W]
                 as_float.astype(np.float64),            # any float dtype
                 picture[:, ::-1][:, ::-1]):             # any strides
        np.testing.assert_array_equal(lm.preprocess(same, "crop", 70), want)


def test_load_image_then_preprocess_then_push(tiny_engine, tiny_frames, fixtures):
    # The chain a newcomer writes: its uint8 [3, H, W] output used to be refused by push.
    folder = os.path.join(fixtures, "tiny", "frames")
    chained = [lm.preprocess(lm.load_image(p), "none") for p in lm.list_images(folder)[:6]]
    assert chained[0].dtype == np.uint8 and chained[0].shape == (3, 56, 70)
    a = push_all(tiny_engine.start(scale_frames=SCALE, window=WINDOW), tiny_frames[:6])
    b = push_all(tiny_engine.start(scale_frames=SCALE, window=WINDOW), chained)
    assert_same_results(a, b)
    # Float channels-last, and uint8 channels-last as before.
    hwc = [f.transpose(1, 2, 0) for f in tiny_frames[:6]]
    c = push_all(tiny_engine.start(scale_frames=SCALE, window=WINDOW), hwc)
    assert_same_results(a, c)
    d = push_all(tiny_engine.start(scale_frames=SCALE, window=WINDOW),
                 [np.ascontiguousarray(f.transpose(1, 2, 0)) for f in chained])
    assert_same_results(a, d)


def test_inference_streaming_takes_the_same_layouts(tiny_engine, tiny_frames):
    want = tiny_engine.inference_streaming(tiny_frames[:6], SCALE, window=WINDOW)
    u8 = np.round(tiny_frames[:6] * 255).astype(np.uint8)  # stacked preprocess outputs
    for images in (u8, u8.transpose(0, 2, 3, 1), tiny_frames[:6].transpose(0, 2, 3, 1),
                   list(u8)):
        got = tiny_engine.inference_streaming(images, SCALE, window=WINDOW)
        for key in ("pose_enc", "depth", "depth_conf"):
            np.testing.assert_array_equal(got[key], want[key])


# --- the reference's Python API ---------------------------------------------------------------

class TorchLikeDevice:
    """What torch.device("cpu") looks like to us: an object whose str() names the device."""

    def __init__(self, name):
        self.name = name

    def __str__(self):
        return self.name


def test_inference_streaming_has_the_reference_signature_and_outputs(tiny_engine, tiny_frames):
    # The reference's positional order: images, num_scale_frames, keyframe_interval,
    # output_device, flow_threshold (the seeds' streaming driver), max_non_keyframe_gap.
    out = tiny_engine.inference_streaming(tiny_frames, SCALE, 3, "cpu", 0.0, 30, window=WINDOW)
    assert set(out) == {"pose_enc", "depth", "depth_conf", "images"}
    S, _, H, W = tiny_frames.shape
    for key, shape in (("pose_enc", (1, S, 9)), ("depth", (1, S, H, W, 1)),
                       ("depth_conf", (1, S, H, W))):
        assert isinstance(out[key], np.ndarray) and out[key].dtype == np.float32
        assert out[key].shape == shape, key
    same = tiny_engine.inference_streaming(tiny_frames, num_scale_frames=SCALE,
                                           keyframe_interval=3, window=WINDOW,
                                           output_device=TorchLikeDevice("cpu"))
    np.testing.assert_array_equal(same["pose_enc"], out["pose_enc"])
    session = push_all(tiny_engine.start(scale_frames=SCALE, window=WINDOW, keyframe_interval=3),
                       tiny_frames)
    np.testing.assert_array_equal(out["pose_enc"][0], np.stack([r.pose_enc for r in session]))
    # num_scale_frames=None: the default, 8 scale frames.
    none = tiny_engine.inference_streaming(tiny_frames, None, window=WINDOW)
    eight = tiny_engine.inference_streaming(tiny_frames, 8, window=WINDOW)
    np.testing.assert_array_equal(none["depth"], eight["depth"])
    with pytest.raises(ValueError, match="output_device 'cuda'.*None or \"cpu\""):
        tiny_engine.inference_streaming(tiny_frames, output_device="cuda")
    with pytest.raises(ValueError, match="output_device"):
        tiny_engine.inference_streaming(tiny_frames, output_device=TorchLikeDevice("cuda:0"))


def test_flow_threshold_as_the_seeds_pass_it(tiny_engine, tiny_frames):
    flow = tiny_engine.inference_streaming(tiny_frames, SCALE, 1, None, 0.5, 3, window=WINDOW)
    session = push_all(tiny_engine.start(scale_frames=SCALE, window=WINDOW, flow_threshold=0.5,
                                         max_non_keyframe_gap=3), tiny_frames)
    np.testing.assert_array_equal(flow["pose_enc"][0], np.stack([r.pose_enc for r in session]))
    every = tiny_engine.inference_streaming(tiny_frames, SCALE, window=WINDOW)
    assert not np.array_equal(flow["pose_enc"], every["pose_enc"])  # some frames were skipped


def test_get_cache_stats_and_clean_kv_cache(tiny_frames):
    engine = lm.Engine("synthetic:1", arch="tiny", device=DEVICE, precision="f32")
    keys = ("frame_count", "scale_pages", "live_pages", "free_pages", "special_tokens")
    assert all(engine.get_cache_stats()[k] == 0 for k in keys)
    engine.inference_streaming(tiny_frames, SCALE, 3, window=WINDOW)
    stats = engine.get_cache_stats()
    assert list(stats)[:5] == list(keys)  # the reference's keys first
    assert all(isinstance(stats[k], int) for k in keys)
    # Every frame the cache stored, evicted ones included: the 4 scale frames and keyframes
    # 4, 7, 10 and 13 of 16 frames.
    assert stats["frame_count"] == stats["stored_frames"] == SCALE + 4
    assert stats["scale_pages"] > 0 and stats["live_pages"] > 0
    # The same numbers as a session that streamed the same frames.
    session = engine.start(scale_frames=SCALE, window=WINDOW, keyframe_interval=3)
    push_all(session, tiny_frames)
    assert session.get_cache_stats() == session.cache_stats()
    for k in keys:
        assert session.get_cache_stats()[k] == stats[k], k
    engine.clean_kv_cache()
    assert all(engine.get_cache_stats()[k] == 0 for k in keys)
    session.clean_kv_cache()
    assert session.get_cache_stats()["frame_count"] == 0


def test_inference_windowed_has_the_reference_positional_order(tiny_engine, tiny_frames):
    # images, window_size, overlap_size, overlap_keyframes, num_scale_frames, scale_mode,
    # output_device, keyframe_interval
    a = tiny_engine.inference_windowed(tiny_frames, 8, 4, None, SCALE, "median", "cpu", 1)
    b = tiny_engine.inference_windowed(tiny_frames, window_size=8, overlap_size=4,
                                       num_scale_frames=SCALE)
    np.testing.assert_array_equal(a["pose_enc"], b["pose_enc"])
    with pytest.raises(ValueError, match="scale_mode"):
        tiny_engine.inference_windowed(tiny_frames, scale_mode="mean")
    with pytest.raises(ValueError, match="output_device"):
        tiny_engine.inference_windowed(tiny_frames, output_device="cuda")


# --- argument errors name the argument and describe it, never print it ------------------------

def short(error):
    text = str(error.value)
    assert len(text) < 600 and text.count("\n") == 0, text
    assert "0., 0." not in text and "0, 0, 0" not in text  # no array values
    return text


def test_a_frame_of_the_wrong_dtype_is_a_type_error_that_names_it(tiny_engine):
    session = tiny_engine.start()
    with pytest.raises(TypeError) as e:
        session.push(np.zeros((480, 640, 3), np.int32))
    assert "push: image" in short(e) and "int32 [480, 640, 3]" in short(e)
    with pytest.raises(TypeError, match="push: image .* got str"):
        session.push("frame.png")
    with pytest.raises(TypeError, match=r"float32 \[480, 640, 4\]"):
        session.push(np.zeros((480, 640, 4), np.float32))
    assert issubclass(lm.ImageError, TypeError) and issubclass(lm.ImageError, ValueError)
    with pytest.raises(TypeError) as e:
        lm.preprocess(np.zeros((100, 150), np.uint8))
    assert "preprocess: image" in short(e) and "uint8 [100, 150]" in short(e)
    with pytest.raises(TypeError) as e:
        tiny_engine.inference_streaming(np.zeros((5, 56, 70), np.float32))
    assert "inference_streaming: images" in short(e) and "float32 [5, 56, 70]" in short(e)


def test_bad_arguments_never_print_the_arrays(tiny_engine, tiny_frames):
    big = np.zeros((8, 3, 518, 518), np.float32)
    with pytest.raises(TypeError) as e:
        tiny_engine.inference_streaming(big, num_scale_frames=4, output_devce="cpu")
    assert "unexpected keyword argument 'output_devce'" in short(e)
    assert "inference_streaming" in short(e)
    with pytest.raises(TypeError) as e:
        tiny_engine.inference_streaming(big, num_scale_frames="4")
    assert "num_scale_frames" in short(e) and "str" in short(e)
    with pytest.raises(TypeError) as e:
        tiny_engine.inference_streaming(big, keyframe_interval=[4])
    assert "float32 [8, 3, 518, 518]" in short(e) and "keyframe_interval=list" in short(e)
    with pytest.raises(TypeError) as e:
        lm.preprocess(np.zeros((480, 640, 3), np.uint8), mode=3)
    assert "preprocess" in short(e) and "uint8 [480, 640, 3]" in short(e)
    with pytest.raises(TypeError) as e:
        tiny_engine.start().push(tiny_frames[0], 1)
    assert "Session.push" in short(e)
    with pytest.raises(TypeError) as e:
        lm.Engine("synthetic:1", arch="tiny", devices="cpu")
    assert "unexpected keyword argument 'devices'" in short(e)


def test_a_path_of_the_wrong_type_names_the_argument():
    with pytest.raises(TypeError, match=r"Engine: model must be a path .* got int"):
        lm.Engine(3, arch="tiny")
    with pytest.raises(TypeError) as e:
        lm.load_image(np.zeros((480, 640, 3), np.uint8))
    assert "load_image: path" in short(e) and "uint8 [480, 640, 3]" in short(e)
