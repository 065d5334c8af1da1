// Memory preflight: what a streaming (or windowed) run will hold at its peak, computed from shapes
// alone (no weights, no device), so a long run can be refused before it starts instead of failing
// with an allocation error hundreds of frames in.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "lingbot/engine.h"
#include "model/config.h"
#include "stream/windowed.h"

namespace lingbot {

struct MemoryEstimate {
  size_t weights = 0;       // transformer matrices in the compute dtype, everything else F32
  size_t kv_cache = 0;      // paged aggregator cache, all global layers, special stream included
  size_t camera_cache = 0;  // camera head K/V, F32, grown in whole chunks
  size_t activations = 0;   // work buffers, depth-head plan, backend scratch (see the .cpp)
  size_t total = 0;
};

// Parameters the model reads (the DINO mask token, unused at inference, is not counted).
size_t count_parameters(const ModelConfig& config);

// Frames a sequence of `frames` frames leaves in the caches: the scale frames plus the
// keyframes among the rest under stream.keyframe_interval.
int64_t stored_frames(int64_t frames, const StreamOptions& stream);

// height and width are the model input (after preprocessing), multiples of the patch size.
MemoryEstimate estimate_memory(const ModelConfig& config, DType compute, int64_t height,
                               int64_t width, int64_t frames, const StreamOptions& stream);

// One line for a run that does not fit in `available` bytes: the numbers, and the mildest change
// of each knob (scale frames, window, keyframe interval, input width) that would make it fit.
// The arguments after `available` are those the estimate was made with.
std::string explain_shortfall(const MemoryEstimate& need, size_t available,
                              const ModelConfig& config, DType compute, int64_t height,
                              int64_t width, int64_t frames, const StreamOptions& stream);

// Windowed mode resets the session before every window, so the caches never hold more than one
// window: the peak is that of the longest window, however long the sequence, and the special
// stream only holds what one window evicts past the sliding window. The functions below take
// the options run_windowed gets.

// Frames of the longest window plan_windows makes (the first one), fixed-interval schedule.
int64_t longest_window(int64_t frames, const WindowedOptions& options);
// The most frames one window keeps in the caches (scale frames and keyframes); with a flow
// threshold windows follow the motion but still close at window_size cached frames.
int64_t window_cached_frames(int64_t frames, const WindowedOptions& options);
// The options each window is streamed with.
StreamOptions window_stream_options(const WindowedOptions& options);
// ", windowed: 4 windows of up to 64 frames, 64 frames cached per window", for --dry-run.
std::string describe_windows(int64_t frames, const WindowedOptions& options);
MemoryEstimate estimate_windowed_memory(const ModelConfig& config, DType compute, int64_t height,
                                        int64_t width, int64_t frames,
                                        const WindowedOptions& options);
// As explain_shortfall, with the knobs of windowed mode: window size, sliding window, input width.
std::string explain_windowed_shortfall(const MemoryEstimate& need, size_t available,
                                       const ModelConfig& config, DType compute, int64_t height,
                                       int64_t width, int64_t frames,
                                       const WindowedOptions& options);

// "12.5 GB", or "57 MB" below 1 GB (decimal units, as the benchmark reports device memory).
std::string format_gb(size_t bytes);

// MemAvailable of /proc/meminfo in bytes; 0 where it cannot be read.
size_t host_memory_available();

}  // namespace lingbot
