"""load_image / preprocess / load_images against the reference's preprocessing, byte for byte."""

import os

import numpy as np
import pytest

import lingbot_map as lm
from reference import read_safetensors


@pytest.fixture(scope="module")
def preproc(fixtures):
    folder = os.path.join(fixtures, "preproc")
    return folder, read_safetensors(os.path.join(folder, "expected_u8.safetensors"))


def test_preprocess_is_byte_exact(preproc):
    folder, want = preproc
    assert len(want) >= 10
    for key, expected in want.items():
        mode, name = key.split("/")
        got = lm.preprocess(lm.load_image(os.path.join(folder, name)), mode)
        assert got.dtype == np.uint8 and got.shape == expected.shape, key
        np.testing.assert_array_equal(got, expected, err_msg=key)


def test_load_images_is_the_float_of_the_bytes(preproc):
    folder, want = preproc
    for key, expected in want.items():
        mode, name = key.split("/")
        images = lm.load_images(os.path.join(folder, name), mode=mode)
        assert images.dtype == np.float32 and images.shape == (1, *expected.shape), key
        np.testing.assert_array_equal(images[0], expected.astype(np.float32) / 255, err_msg=key)


def test_load_images_of_a_folder_in_natural_order(fixtures):
    folder = os.path.join(fixtures, "tiny", "frames")
    names = [os.path.basename(p) for p in lm.list_images(folder)]
    assert names == sorted(names) and len(names) == 16
    images = lm.load_images(folder, mode="none")
    assert images.shape == (16, 3, 56, 70)
    first = lm.load_image(os.path.join(folder, names[0]))
    np.testing.assert_array_equal(images[0], first.transpose(2, 0, 1) / np.float32(255))


def test_mixed_sizes_are_centred_on_white(preproc):
    folder, _ = preproc
    files = [os.path.join(folder, "real0.png"), os.path.join(folder, "portrait.png")]
    images = lm.load_images(files, mode="crop")
    a = lm.preprocess(lm.load_image(files[0]), "crop")
    b = lm.preprocess(lm.load_image(files[1]), "crop")
    h = max(a.shape[1], b.shape[1])
    assert images.shape == (2, 3, h, 518)
    small, other = (0, a) if a.shape[1] < h else (1, b)
    top = (h - other.shape[1]) // 2
    np.testing.assert_array_equal(images[small, :, top:top + other.shape[1]],
                                  other.astype(np.float32) / 255)
    assert (images[small, :, :top] == 1).all()


def test_read_frames_gives_the_decoded_pictures(fixtures, tmp_path):
    folder = os.path.join(fixtures, "tiny", "frames")
    frames = lm.read_frames(folder, first_k=5, stride=2)
    got = list(frames)
    want = [lm.load_image(p) for p in lm.list_images(folder)[:5:2]]
    assert len(got) == len(want) == 3
    for g, w in zip(got, want):
        assert g.dtype == np.uint8
        np.testing.assert_array_equal(g, w)
    with pytest.raises(FileNotFoundError):
        lm.read_frames(tmp_path / "nope")
    with pytest.raises(ValueError, match="stride"):
        lm.read_frames(folder, stride=0)
