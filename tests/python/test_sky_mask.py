"""lm.run's sky masking (mask_sky, sky_mask_dir) and rotate_clockwise_90, as the CLI's flags."""

import os

import numpy as np
import pytest

import lingbot_map as lm

SETTINGS = dict(preprocess="none", scale_frames=4, window=6, first_k=6)


def test_sky_model_masks_then_its_folder_alone(tiny_engine, fixtures, tmp_path):
    pytest.importorskip("onnx")
    import sky_model  # tests/python/sky_model.py: a small model of skyseg.onnx's contract

    sky_model.main(str(tmp_path))
    frames = os.path.join(fixtures, "tiny", "frames")
    masks = tmp_path / "masks"
    try:
        p = lm.run(frames, engine=tiny_engine, mask_sky=tmp_path / "sky.onnx", sky_mask_dir=masks,
                   **SETTINGS)
    except RuntimeError as e:
        if "no OpenCV DNN module" in str(e):
            pytest.skip("built without OpenCV")
        raise
    assert sorted(os.listdir(masks)) == [f"{i:03d}.png" for i in range(6)]
    plain = lm.run(frames, engine=tiny_engine, **SETTINGS)
    zero = p["depth_conf"] == 0
    assert zero.any() and not zero.all()
    assert (plain["depth_conf"] > 0).all()
    np.testing.assert_array_equal(p["depth_conf"][~zero], plain["depth_conf"][~zero])
    np.testing.assert_array_equal(p["depth"], plain["depth"])
    # The stored masks alone give the same confidence.
    again = lm.run(frames, engine=tiny_engine, sky_mask_dir=masks, **SETTINGS)
    np.testing.assert_array_equal(again["depth_conf"], p["depth_conf"])

    with pytest.raises(FileNotFoundError, match="no such file"):
        lm.run(frames, engine=tiny_engine, mask_sky=tmp_path / "none.onnx", **SETTINGS)
    with pytest.raises(ValueError, match="needs mask_sky or sky_mask_dir"):
        lm.run(frames, engine=tiny_engine, sky_mask_visualization_dir=tmp_path / "v", **SETTINGS)


def test_rotate_clockwise_90_turns_the_frames_before_preprocessing(tiny_engine, fixtures):
    frames = os.path.join(fixtures, "tiny", "frames")
    p = lm.run(frames, engine=tiny_engine, rotate_clockwise_90=True,
               **dict(SETTINGS, first_k=2))
    want = lm.load_images(frames, mode="none")[:2]  # [2, 3, 56, 70]
    np.testing.assert_array_equal(p["images"], np.rot90(want, k=-1, axes=(2, 3)))
    assert p["depth"].shape == (2, 70, 56, 1)
