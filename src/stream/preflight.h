// Memory preflight, the estimates behind lingbot/preflight.h (which holds the types): per
// architecture, dtype and settings, for the public preflight() and for the tests.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "lingbot/engine.h"
#include "lingbot/preflight.h"
#include "model/config.h"
#include "stream/windowed.h"

namespace lingbot {

// Frames a sequence of `frames` frames leaves in the caches: the scale frames plus the
// keyframes among the rest under stream.keyframe_interval.
int64_t stored_frames(int64_t frames, const StreamOptions& stream);

// height and width are the model input (after preprocessing), multiples of the patch size.
// `results`: what the run keeps of its results (none counted when null).
MemoryEstimate estimate_memory(const ModelConfig& config, DType compute, int64_t height,
                               int64_t width, int64_t frames, const StreamOptions& stream,
                               const ResultOutputs* results = nullptr);

// Host bytes a run of `frames` frames keeps of its results, growing with the run:
// - predictions.safetensors: pose_enc, c2w, w2c and intrinsics of every frame, collected until
//   the end (depth and confidence go to disk frame by frame; windowed: plus the two windows
//   being aligned, each held whole);
// - the GLB export: every frame's points (16 bytes each; every point of the stride grid of its
//   PointOptions, i.e. all of them above the confidence threshold) and its camera, until the end;
// - the video timestamps of the TUM trajectory (8 bytes a frame);
// - the voxel filters of the point exports (a fixed table each);
// - the maps the caller keeps of every frame (ResultOutputs::kept_maps);
// and what the pipelined session holds on the host whatever the length: its two result slots
// (normalized input, depth and confidence of up to a phase-1 call each: scale frames), the
// phase-1 frames waiting in the session and their batched copy, the frames waiting for their
// results, and the input frames the reader keeps (`recent_frames`). Other exports (PLY,
// trajectories, JSON, COLMAP, nerfstudio, depth maps, images) are written frame by frame and
// keep nothing. `window_frames`: windowed mode, the frames of the longest window.
size_t estimate_result_memory(const ResultOutputs& results, int64_t height, int64_t width,
                              int64_t frames, int64_t scale_frames, int64_t window_frames = 0);

// For a run that does not fit in `available` bytes: the mildest change of each setting (window,
// keyframe interval, scale frames, input width) that would make it fit on its own, and the
// largest special-frame cap that would, when the special stream and the camera caches grow with
// the run. The other arguments are those the estimate was made with.
MilderSettings milder_settings(const ModelConfig& config, DType compute, int64_t height,
                               int64_t width, int64_t frames, const StreamOptions& stream,
                               const ResultOutputs* results, size_t available);

// What grows with the sequence and a special-frame cap would bound (the special stream and the
// camera caches) when it is more than half of the estimate and no cap is set, else 0.
size_t unbounded_growth(const MemoryEstimate& m, const StreamOptions& stream);

// The time a run of `plan` on a model of `config` will take (time_estimate.cpp).
TimeEstimate estimate_time(const RunPlan& plan, const ModelConfig& config);

// Windowed mode resets the session before every window, so the caches never hold more than one
// window: the peak is that of the longest window, however long the sequence, and the special
// stream only holds what one window evicts past the sliding window. The functions below take
// the options run_windowed gets.

// Frames of the longest window plan_windows makes (the first one), fixed-interval schedule.
int64_t longest_window(int64_t frames, const WindowedOptions& options);
// The most frames one window keeps in the caches (scale frames and keyframes); with a flow
// threshold windows follow the motion but still close at window_size cached frames.
int64_t window_cached_frames(int64_t frames, const WindowedOptions& options);
// (per_window_stream, the options each window is streamed with, is in stream/windowed.h.)
// `results`: as estimate_memory's; windowed results cover the whole sequence.
MemoryEstimate estimate_windowed_memory(const ModelConfig& config, DType compute, int64_t height,
                                        int64_t width, int64_t frames,
                                        const WindowedOptions& options,
                                        const ResultOutputs* results = nullptr);
// As milder_settings, with the settings of windowed mode: window size, each window's sliding
// window (options.stream.window, in `window`), input width, special-frame cap.
MilderSettings milder_windowed_settings(const ModelConfig& config, DType compute, int64_t height,
                                        int64_t width, int64_t frames,
                                        const WindowedOptions& options,
                                        const ResultOutputs* results, size_t available);

}  // namespace lingbot
