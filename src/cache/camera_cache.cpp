#include "cache/camera_cache.h"

#include <algorithm>
#include <string>

#include "lingbot/error.h"

namespace lingbot {

CameraCache::CameraCache(Backend& backend, int iterations, int depth, int64_t heads,
                         int64_t head_dim, DType dtype, int64_t chunk_frames)
    : iterations_(iterations), depth_(depth), dtype_(dtype) {
  LINGBOT_CHECK(iterations > 0 && depth > 0, "CameraCache: needs at least one slot");
  slots_.reserve(static_cast<size_t>(iterations) * depth);
  for (int i = 0; i < iterations * depth; ++i)
    slots_.emplace_back(backend, heads, head_dim, dtype, chunk_frames);
}

KVStream& CameraCache::slot(int iteration, int block) {
  LINGBOT_CHECK(
      iteration >= 0 && iteration < iterations_ && block >= 0 && block < depth_,
      "CameraCache: no slot (" + std::to_string(iteration) + ", " + std::to_string(block) + ")");
  return slots_[static_cast<size_t>(iteration) * depth_ + block];
}

const KVStream& CameraCache::slot(int iteration, int block) const {
  return const_cast<CameraCache*>(this)->slot(iteration, block);
}

void CameraCache::append(int iteration, int block, const Tensor& k, const Tensor& v) {
  slot(iteration, block).append(k, v);
}

void CameraCache::segments(int iteration, int block, std::vector<KVSegment>& out) const {
  slot(iteration, block).segments(out);
}

void CameraCache::truncate(int64_t frames) {
  int64_t longest = 0;
  for (const KVStream& s : slots_) longest = std::max(longest, s.rows());
  LINGBOT_CHECK(frames >= 0 && frames <= longest, "CameraCache::truncate beyond its end");
  // Slots can differ in length only after a forward call failed half-way; min() restores them.
  for (KVStream& s : slots_) s.truncate(std::min(frames, s.rows()));
}

void CameraCache::rollback_last_frame() {
  LINGBOT_CHECK(rows() > 0, "CameraCache: rollback on an empty cache");
  truncate(rows() - 1);
}

size_t CameraCache::bytes_in_use() const {
  size_t n = 0;
  for (const KVStream& s : slots_) n += s.bytes_in_use();
  return n;
}

size_t CameraCache::bytes_reserved() const {
  size_t n = 0;
  for (const KVStream& s : slots_) n += s.bytes_reserved();
  return n;
}

}  // namespace lingbot
