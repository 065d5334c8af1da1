// The camera head's K/V cache: one slot per (refinement iteration, trunk block), each holding one
// camera token per cached frame. The reference never evicts here (spec 02 §3.6), so the cache
// only grows by one row per keyframe and shrinks only by rollback or reset.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "backend/ops.h"
#include "cache/kv_stream.h"

namespace lingbot {

class CameraCache {
 public:
  // chunk_frames: rows per allocation in every slot; growth never moves rows already written.
  CameraCache(Backend& backend, int iterations, int depth, int64_t heads, int64_t head_dim,
              DType dtype = DType::F32, int64_t chunk_frames = 64);
  // A copy would share the slots' storage, so only moves are allowed.
  CameraCache(const CameraCache&) = delete;
  CameraCache& operator=(const CameraCache&) = delete;
  CameraCache(CameraCache&&) = default;

  int iterations() const { return iterations_; }
  int depth() const { return depth_; }
  DType dtype() const { return dtype_; }

  // Appends k, v [frames, heads, head_dim] to slot (iteration, block).
  void append(int iteration, int block, const Tensor& k, const Tensor& v);
  // Appends the segments of slot (iteration, block) to `out`, oldest frame first.
  void segments(int iteration, int block, std::vector<KVSegment>& out) const;

  // Frames cached. Every slot holds the same count between forward calls.
  int64_t rows() const { return slots_.front().rows(); }
  void truncate(int64_t frames);
  // Undoes the last stored frame: a caller that stored a frame speculatively takes it back.
  void rollback_last_frame();
  // Empties every slot (clean_kv_cache); chunks stay allocated for reuse.
  void reset() { truncate(0); }

  size_t bytes_in_use() const;
  size_t bytes_reserved() const;

 private:
  KVStream& slot(int iteration, int block);
  const KVStream& slot(int iteration, int block) const;

  int iterations_, depth_;
  DType dtype_;
  std::vector<KVStream> slots_;  // iteration-major
};

}  // namespace lingbot
