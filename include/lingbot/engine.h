// Public API: load a LingBot-Map model once (Engine), stream frames through it (Session).
//
//   auto engine = lingbot::Engine::create({.model = "model.safetensors"});
//   auto session = engine->start({});
//   for (frame : video) session->push(frame, [](const lingbot::FrameResult& r) { ... });
//   session->finish(on_result);
//
// Pose convention: pose_enc = [t (3), quaternion x y z w (4), fov_y, fov_x] and [R(q) | t] maps
// camera coordinates to world coordinates (c2w; t is the camera centre; OpenCV axes: x right,
// y down, z forward). w2c is its inverse. (The reference demo's key "extrinsic" is w2c.)
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "lingbot/tensor.h"

namespace lingbot {

struct EngineOptions {
  std::string model;  // checkpoint path (.safetensors, .pt) or "synthetic:SEED"
  std::string arch;   // "lingbot-map", "tiny", or empty: inferred from the checkpoint
  // "cpu", "cuda" (the first GPU) or "cuda:N". Each engine lives on one device; a machine with
  // several GPUs runs an engine per device (sessions of one engine share its device).
  std::string device = "cpu";
  // Transformer math: "f32", "bf16" (fp32 accumulation; heads stay f32; the KV cache bf16 too),
  // "fp8" (as "auto" with the global layers' KV cache in e4m3 with per-head scales: half the
  // bytes of bf16; the CPU and every GPU), or "auto": f32 on the CPU; bf16 on the GPU, with the
  // fp8 KV cache (within the bf16 engine's tolerances).
  std::string precision = "auto";
  // Which CUDA kernels run: "auto" (the Hopper kernels on H100/H200, the portable ones
  // elsewhere), "hopper" (an error on other GPUs) or "portable" (what an sm_80/86/89 GPU runs:
  // mma.sync attention and convolutions, no Hopper-only instructions; measurable on an H100).
  std::string gpu_path = "auto";
  int threads = 0;  // CPU threads, 0 = all cores
};

struct StreamOptions {
  int scale_frames = 8;       // phase-1 frames, kept in the cache forever
  int window = 64;            // sliding window of cached frames
  int keyframe_interval = 1;  // frames between keyframes; non-keyframes are not cached
  int camera_iterations = 4;  // camera-head refinement iterations
  bool cross_frame_special = true;
  bool camera_only = false;
  bool include_scale_frames = true;
  // Flow-based adaptive keyframes: a streamed frame is kept when its predicted geometry moves
  // more than this many pixels (model input) against the last keyframe, or when
  // max_non_keyframe_gap frames have passed since it. 0 = off: keyframe_interval applies.
  float flow_threshold = 0;
  int max_non_keyframe_gap = 30;
  // Bounded memory for endless streams (not in the reference): > 0 keeps the special tokens of
  // only this many most recently evicted frames, and camera-head tokens only of the scale frames
  // and the window + this many newest frames. 0 = unbounded, as the reference.
  int64_t max_special_frames = 0;
  // A global place descriptor per frame (FrameResult::descriptor), for loop detection: the DINO
  // trunk's output mean-pooled over the patch tokens and over the register tokens, each
  // L2-normalised, concatenated and scaled to unit length (2 x width floats: 8 KB for the released
  // model). Off by default: the step then queues nothing more.
  bool descriptors = false;
};

// Whether `device` names a GPU ("cuda" or "cuda:N"), and which one (-1 for anything else, also
// for a malformed index).
int cuda_device_index(const std::string& device);
bool is_cuda_device(const std::string& device);

// The keyframe interval of a stream of `frames` frames when none is given: the reference demo's
// rule for long videos (src/engine.cpp).
int auto_keyframe_interval(int64_t frames);

struct FrameResult {
  int64_t index = 0;  // frame number in the sequence
  bool keyframe = true;
  bool scale_frame = false;  // one of the first scale_frames of its sequence (or window)
  std::array<float, 9> pose_enc{};
  std::array<float, 12> c2w{}, w2c{};  // row-major 3x4
  std::array<float, 9> intrinsics{};   // row-major 3x3, pixels of the model input
  int height = 0, width = 0;
  std::vector<float> depth, confidence;  // [height * width], row-major
  // StreamOptions::descriptors only (else empty): the frame's unit-length place descriptor;
  // cosine similarity between frames is the dot product.
  std::vector<float> descriptor;
  // Which pose c2w, w2c and pose_enc hold. false: the stream's, what the model said when the
  // frame was computed (every result a session delivers). true: the loop-closed pose a run
  // rewrites its exports with at its end (RunOptions::loop); depth is then in that pose's units
  // (the stream's depth times the frame's optimized scale).
  bool optimized = false;
};

struct CacheStats {  // one global layer (all hold the same pages) after the last frame
  int64_t stored_frames = 0, scale_pages = 0, live_pages = 0, free_pages = 0, special_tokens = 0;
  size_t bytes = 0;                        // K/V bytes in use, this layer
  size_t bytes_reserved = 0;               // K/V bytes allocated, this layer
  int64_t layers = 0;                      // global layers, each holding as much
  int64_t special_frames = 0;              // evicted frames whose specials are still attended to
  size_t special_bytes = 0;                // part of `bytes`: the evicted frames' specials
  size_t special_bytes_reserved = 0;       // part of `bytes_reserved`
  size_t camera_cache_bytes = 0;           // camera head K/V in use, all its slots
  size_t camera_cache_bytes_reserved = 0;  // camera head K/V allocated, all its slots
};

struct ModelInfo {
  std::string arch;
  int64_t dim = 0, depth = 0, heads = 0;
  size_t parameters = 0;
  std::string backend;
  // What EngineOptions::precision resolved to: the transformer's dtype and the KV cache's
  // ("F32", "BF16", "F8_E4M3").
  std::string compute, kv_cache;
};

// What a session snapshot (Session::save) holds, read from its header alone (`inspect`).
struct SnapshotInfo {
  int version = 0;
  // The model it was made with: resume needs the same architecture, precision and weights.
  std::string arch, compute, kv_cache, weights;
  int64_t dim = 0, depth = 0, heads = 0;
  StreamOptions options;          // the saved session's
  int64_t height = 0, width = 0;  // model input; 0 before its first frame
  int64_t frames = 0;             // frames pushed before the save: the next frame's index
  int64_t stored_frames = 0;      // kept by the KV cache (scale frames and keyframes)
  int64_t scale_frames = 0;       // in the cache's scale pages
  int64_t window_frames = 0;      // in its sliding window
  int64_t special_frames = 0;     // evicted frames whose special tokens are still attended to
  int64_t pending_frames = 0;     // scale-block frames pushed but not yet run
  int64_t trajectory = 0;         // delivered frames whose cameras it holds
  size_t bytes = 0;               // the file
  size_t kv_bytes = 0;            // of it the global layers' KV cache, special stream included
  size_t camera_bytes = 0;        // and the camera head's cache
};
// Reads and checks a snapshot's header and tensor table; throws Error for a file that is not a
// whole snapshot of a version this build reads.
SnapshotInfo read_snapshot_info(const std::string& path);
// Whether the file's header names the snapshot format (whole or not): `inspect` tells snapshots
// from checkpoints by it. False for anything else, a missing file included.
bool is_session_snapshot(const std::string& path);

// How Engine::resume continues a saved session. Everything that shapes the saved state (the
// stream options) is the saved session's; only what adds to the results may change.
struct ResumeOptions {
  std::optional<bool> descriptors;  // StreamOptions::descriptors from now on; unset: as saved
};

class Session {
 public:
  using Callback = std::function<void(const FrameResult&)>;
  virtual ~Session() = default;
  // image: host F32 [3, H, W], values in [0, 1], H and W multiples of 14. Results arrive in
  // frame order through `on_result`: the first scale_frames together, then each frame's within
  // its own push on the CPU, and on a GPU within the next push (or finish): the device computes
  // frame t while the host returns to take frame t+1.
  //
  // Sessions of one engine are independent: each owns its sequence's caches, so several
  // cameras can share one loaded model, pushed alternately frame by frame or each from its own
  // thread, and every session gets the results it would get alone. Sessions pushed from
  // several threads share steps: the frames ready together (one each, of one size) run as one
  // batch, and each session's results are its results alone up to the GEMM's rounding (about
  // 1e-6 relative on the CPU). One session is not thread-safe: push, finish, reset and
  // cache_stats of one session must not run concurrently.
  virtual void push(const Tensor& image, const Callback& on_result) = 0;
  // Delivers every outstanding result and runs what is still buffered (a sequence shorter than
  // scale_frames).
  virtual void finish(const Callback& on_result) = 0;
  // Delivers the results of every frame pushed so far, waiting for the device; the sequence goes
  // on (frames buffered for the scale block stay buffered). For live sources slower than the
  // device: a result that would otherwise wait for the next push comes now, at the cost of the
  // overlap between this frame's device work and the next push's host work.
  virtual void flush(const Callback& on_result) = 0;
  virtual void reset() = 0;  // start a new sequence; results not yet delivered are dropped
  // The caches after the last frame; called from a result callback, after that result's frame.
  virtual CacheStats cache_stats() const = 0;

  // Writes the whole sequence to `path` (Engine::resume continues it): the KV cache's scale
  // and window pages and special-token stream in their stored dtype, the camera head's caches,
  // the keyframe state, the frame counters (and so the RoPE positions), frames buffered for the
  // scale block, the stream options, the trajectory, and the model's identity. One safetensors
  // file, written beside `path` and renamed over it once complete: `path` is never a part. At a
  // frame boundary: a step still on the device is waited for, and its results are delivered as
  // they would have been (at the next push, finish or flush). Throws Error when it cannot write.
  virtual void save(const std::string& path);
  // The camera of every frame whose step has run in this sequence so far (delivered, or on a
  // GPU waiting for the next push, finish or flush), in order, without maps (index, keyframe,
  // scale_frame, pose_enc, c2w, w2c, intrinsics, height, width); a resumed session's begins
  // with the saved ones, and delivers results from the first frame after them. 48 bytes a frame.
  virtual std::vector<FrameResult> trajectory() const;
};

class Engine {
 public:
  virtual ~Engine() = default;
  static std::unique_ptr<Engine> create(const EngineOptions& options);
  virtual ModelInfo info() const = 0;
  // Device memory the process holds now (GPU backends; 0 on the CPU).
  virtual size_t device_memory_used() const = 0;
  // Device memory still free (GPU backends, after the weights are loaded); 0 = unknown (CPU).
  virtual size_t device_memory_free() const = 0;
  virtual std::unique_ptr<Session> start(const StreamOptions& options) = 0;
  // A session continuing the one saved at `path` (Session::save): the frames pushed next get
  // the results they would have got in the saved session, bit for bit on the CPU, and their
  // indices continue its. Throws Error, saying which, for a file that is missing, truncated,
  // damaged, of another format version, or made with another architecture, precision or
  // weights (the digest of the weights is computed once as the engine loads them).
  virtual std::unique_ptr<Session> resume(const std::string& path,
                                          const ResumeOptions& options = {});
  // Milliseconds per model stage that this engine's steps took since it was created or since
  // reset_profile(), while the environment asks for profiling (lingbot/profile.h); empty
  // otherwise. Each engine keeps its own; lingbot::run reports a run's (RunReport::profile_ms).
  virtual std::map<std::string, double> profile_ms() const { return {}; }
  virtual void reset_profile() {}
};

}  // namespace lingbot
