"""Type stubs of the extension module lingbot_map._core."""

import os
from typing import Callable, Optional, Union

import numpy as np
import numpy.typing as npt

PathLike = Union[str, os.PathLike[str]]
F32 = npt.NDArray[np.float32]
U8 = npt.NDArray[np.uint8]

has_cuda: bool
"""A GPU an engine can run on: the CUDA backend built in and a usable (sm_80+) device present."""
cuda_devices: int
"""Usable GPUs ("cuda:0" ...); 0 without the CUDA backend, a driver or a device."""
built_with_cuda: bool
"""Whether this build has the CUDA backend (whatever the machine has)."""

class ImageError(TypeError, ValueError):
    """A picture argument that is not a uint8 or float array [H, W, 3] or [3, H, W]."""

Image = npt.ArrayLike
"""uint8, or float in [0, 1]; [H, W, 3] or [3, H, W] (a [3, H, 3] array is HWC when uint8)."""

class FrameResult:
    """One frame's predictions; the arrays are float32 views that keep the result alive."""

    @property
    def index(self) -> int: ...
    @property
    def keyframe(self) -> bool: ...
    @property
    def optimized(self) -> bool:
        """False: the stream's pose (what the model said then); True: a loop-closed pose."""
    @property
    def height(self) -> int: ...
    @property
    def width(self) -> int: ...
    @property
    def pose_enc(self) -> F32:
        """[9]: translation, quaternion (x, y, z, w), field of view y and x."""
    @property
    def c2w(self) -> F32:
        """[3, 4] camera-to-world."""
    @property
    def w2c(self) -> F32:
        """[3, 4] world-to-camera (the reference demo's `extrinsic`)."""
    @property
    def intrinsics(self) -> F32:
        """[3, 3] in pixels of the model input."""
    @property
    def depth(self) -> F32:
        """[H, W]."""
    @property
    def confidence(self) -> F32:
        """[H, W], >= 1."""

class Session:
    """One sequence streamed through an engine (Engine.start)."""

    def push(self, image: Image) -> list[FrameResult]:
        """Adds a frame (an Image, sides multiples of 14); returns the results ready so far, in
        frame order."""
    def finish(self) -> list[FrameResult]:
        """Returns every outstanding result."""
    def flush(self) -> list[FrameResult]:
        """Returns the results of every frame pushed so far; the sequence goes on."""
    def reset(self) -> None:
        """Starts a new sequence."""
    def clean_kv_cache(self) -> None:
        """reset(), under the reference's name."""
    def cache_stats(self) -> dict[str, int]:
        """frame_count, scale_pages, live_pages, free_pages, special_tokens (the reference's
        keys), stored_frames, special_frames, layers, byte counts."""
    def get_cache_stats(self) -> dict[str, int]:
        """cache_stats(), under the reference's name."""
    def save(self, path: PathLike) -> None:
        """Writes the whole sequence to a file that Engine.resume continues exactly."""
    def trajectory(self) -> list[FrameResult]:
        """The cameras of every frame returned so far (a resumed session's begin with the
        saved ones), without depth maps."""

class Engine:
    """A loaded LingBot-Map model."""

    def __init__(self, model: PathLike, arch: Optional[str] = None, device: str = "cpu",
                 precision: str = "auto", threads: int = 0) -> None: ...
    def start(self, scale_frames: int = 8, window: int = 64, keyframe_interval: int = 1,
              camera_iterations: int = 4, *, cross_frame_special: bool = True,
              camera_only: bool = False, include_scale_frames: bool = True,
              flow_threshold: float = 0.0, max_non_keyframe_gap: int = 30,
              max_special_frames: int = 0) -> Session: ...
    def resume(self, path: PathLike) -> Session:
        """A session continuing the one Session.save wrote; RuntimeError for a damaged,
        truncated or foreign file, FileNotFoundError for a missing one."""
    def inference_streaming(self, images: npt.ArrayLike, num_scale_frames: Optional[int] = None,
                            keyframe_interval: int = 1, output_device: object = None,
                            flow_threshold: float = 0.0, max_non_keyframe_gap: int = 30, *,
                            window: int = 64, camera_iterations: int = 4,
                            cross_frame_special: bool = True, camera_only: bool = False,
                            include_scale_frames: bool = True, max_special_frames: int = 0,
                            progress: Optional[Callable[[int, int], None]] = None
                            ) -> dict[str, np.ndarray]:
        """images [S, 3, H, W] or [S, H, W, 3] (optionally [1, S, ...]), uint8 or float in
        [0, 1]. output_device: None or "cpu". Returns {pose_enc [1, S, 9], depth
        [1, S, H, W, 1], depth_conf [1, S, H, W], images}."""
    def inference_windowed(self, images: npt.ArrayLike, window_size: int = 64,
                           overlap_size: Optional[int] = None,
                           overlap_keyframes: Optional[int] = None,
                           num_scale_frames: Optional[int] = None, scale_mode: str = "median",
                           output_device: object = None, keyframe_interval: int = 1,
                           flow_threshold: float = 0.0, max_non_keyframe_gap: int = 30, *,
                           sliding_window: int = 64, camera_iterations: int = 4,
                           max_special_frames: int = 0,
                           log: Optional[Callable[[str], None]] = None) -> dict[str, object]:
        """{pose_enc, depth, depth_conf, frame_type, is_keyframe, chunk_scales,
        chunk_transforms, alignment_mode, images}."""
    def get_cache_stats(self) -> dict[str, int]:
        """The caches as the last inference_streaming left them (Session.cache_stats' keys)."""
    def clean_kv_cache(self) -> None:
        """Clears what get_cache_stats reports (the run's caches are freed when it returns)."""
    @property
    def device(self) -> str: ...
    @property
    def info(self) -> dict[str, object]: ...
    def device_memory_used(self) -> int: ...
    def device_memory_free(self) -> int: ...

def load_image(path: PathLike) -> U8:
    """uint8 [H, W, 3] RGB, decoded as Pillow does."""
def preprocess(image: Image, mode: str = "crop", size: int = 518) -> U8:
    """The reference's preprocessing of one image: uint8 [3, H', W'] (push takes it)."""
class Frames:
    """Pictures of a source as uint8 [H, W, 3] RGB (read_frames)."""

    def __iter__(self) -> "Frames": ...
    def __next__(self) -> U8: ...
    def __len__(self) -> int:
        """Frames expected (0 = unknown, e.g. a live source)."""

def read_frames(input: PathLike, fps: float = 10.0, stride: int = 1, first_k: int = 0) -> Frames:
    """A folder, video file, capture device or stream URL as decoded pictures (not
    preprocessed), sampled as the CLI samples them."""
def list_images(folder: PathLike) -> list[str]:
    """Image files of a folder in natural order."""
def parse_export_list(list: str) -> list[str]:
    """"tum,ply", "all" or "none" as export names; ValueError for an unknown one."""
def _run(engine: Engine, input: str, out: str, exports: list[str], mode: str,
         options: dict[str, object], progress: Optional[Callable[[int, int], None]],
         log: Optional[Callable[[str], None]]
         ) -> tuple[list[FrameResult], Optional[F32], dict[str, object]]:
    """lingbot_map.run's engine side: the results, the frames the model saw, and what loop
    closure found (loops; c2w_optimized and scale_optimized where the pose graph ran)."""
