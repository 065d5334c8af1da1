// The camera head's K/V cache: one slot per (refinement iteration, trunk block), each holding one
// camera token per cached frame. The reference never evicts here, so the cache
// only grows by one row per keyframe and shrinks only by rollback or reset.
//
// For bounded memory a limit can keep the first `pinned` frames (the scale frames) and only the
// `recent` newest after them; trim() applies it between steps, so a frame stored speculatively
// can still be rolled back.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

#include "backend/ops.h"
#include "cache/kv_stream.h"

namespace lingbot {

struct CameraCacheLimit {
  int64_t pinned = 0;  // first frames never dropped
  int64_t recent = 0;  // newest frames kept after them; 0 = no limit
};

class CameraCache {
 public:
  // Rows per allocation in every slot; growth never moves rows already written.
  static constexpr int64_t kChunkFrames = 64;
  CameraCache(Backend& backend, int iterations, int depth, int64_t heads, int64_t head_dim,
              DType dtype = DType::F32, int64_t chunk_frames = kChunkFrames);
  // A copy would share the slots' storage, so only moves are allowed.
  CameraCache(const CameraCache&) = delete;
  CameraCache& operator=(const CameraCache&) = delete;
  CameraCache(CameraCache&&) = default;

  int iterations() const { return iterations_; }
  int depth() const { return depth_; }
  DType dtype() const { return dtype_; }

  // Only on an empty cache.
  void set_limit(const CameraCacheLimit& limit);
  // Drops frames beyond the limit; call only when no step is pending.
  void trim();

  // Appends k, v [frames, heads, head_dim] to slot (iteration, block).
  void append(int iteration, int block, const Tensor& k, const Tensor& v);
  // Makes room for `frames` more rows in slot (iteration, block), held from now on, and adds
  // each row's place to `out` (scales unset) for the work that computes them to write there.
  void reserve(int iteration, int block, int64_t frames, std::vector<KVDestination::Frame>& out);
  // Appends the segments of slot (iteration, block) to `out`, oldest frame first.
  void segments(int iteration, int block, std::vector<KVSegment>& out) const;

  // Frames cached. Every slot holds the same count between steps.
  int64_t rows() const { return slots_.front().rows(); }
  void truncate(int64_t frames);
  // Undoes the last stored frame: a caller that stored a frame speculatively takes it back.
  void rollback_last_frame();
  // Empties every slot (clean_kv_cache); chunks stay allocated for reuse.
  void reset() { truncate(0); }

  // A session snapshot's view (stream/session_snapshot.cpp). Every slot holds the same rows
  // between steps, laid out alike: the pinned part filled first, the rest from its head.
  struct Layout {
    int64_t rows = 0, pinned = 0;  // frames held, of them in the pinned part
    int64_t rest_head = 0;         // KVStream::head of the rest
  };
  Layout layout() const;
  // Empties every slot and lays them out as saved; the caller then reserves the rows in each
  // slot (reserve) and writes them. Throws when the layout does not fit this cache's limit.
  void restore(const Layout& layout);
  size_t row_bytes() const { return static_cast<size_t>(heads_ * head_dim_) * dtype_size(dtype_); }
  int64_t heads() const { return heads_; }
  int64_t head_dim() const { return head_dim_; }
  int64_t chunk_frames() const { return chunk_frames_; }

  size_t bytes_in_use() const;
  size_t bytes_reserved() const;

  // What bytes_reserved() reaches after `frames` frames are stored one step at a time (after a
  // first step of up to `pinned` frames), with `slots` slots of `row_elems` values, for preflight.
  static size_t bytes_for(int64_t slots, int64_t row_elems, DType dtype, int64_t chunk_frames,
                          int64_t frames, const CameraCacheLimit& limit = {});

 private:
  // A slot is its pinned frames (only with a limit) followed by the rest.
  struct Slot {
    std::optional<KVStream> pinned;
    KVStream rest;
    int64_t rows() const { return (pinned ? pinned->rows() : 0) + rest.rows(); }
  };
  Slot& slot(int iteration, int block);
  const Slot& slot(int iteration, int block) const;

  Backend* backend_;
  int iterations_, depth_;
  int64_t heads_, head_dim_;
  DType dtype_;
  int64_t chunk_frames_;
  CameraCacheLimit limit_;
  std::vector<Slot> slots_;  // iteration-major
};

}  // namespace lingbot
