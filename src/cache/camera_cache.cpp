#include "cache/camera_cache.h"

#include <algorithm>
#include <string>

#include "lingbot/error.h"

namespace lingbot {

CameraCache::CameraCache(Backend& backend, int iterations, int depth, int64_t heads,
                         int64_t head_dim, DType dtype, int64_t chunk_frames)
    : backend_(&backend),
      iterations_(iterations),
      depth_(depth),
      heads_(heads),
      head_dim_(head_dim),
      dtype_(dtype),
      chunk_frames_(chunk_frames) {
  LINGBOT_CHECK(iterations > 0 && depth > 0, "CameraCache: needs at least one slot");
  slots_.reserve(static_cast<size_t>(iterations) * depth);
  for (int i = 0; i < iterations * depth; ++i)
    slots_.push_back({std::nullopt, KVStream(backend, heads, head_dim, dtype, chunk_frames)});
}

void CameraCache::set_limit(const CameraCacheLimit& limit) {
  LINGBOT_CHECK(limit.pinned >= 0 && limit.recent >= 0, "CameraCache: negative limit");
  LINGBOT_CHECK(rows() == 0, "CameraCache: the limit is set on an empty cache");
  limit_ = limit;
  for (Slot& s : slots_) {
    s.pinned.reset();
    // The pinned frames get one exact chunk of their own so that the rest can be dropped in
    // whole chunks behind them.
    if (limit_.recent > 0 && limit_.pinned > 0)
      s.pinned.emplace(*backend_, heads_, head_dim_, dtype_, limit_.pinned);
  }
}

void CameraCache::trim() {
  if (limit_.recent == 0) return;
  for (Slot& s : slots_) s.rest.drop_front(std::max<int64_t>(s.rest.rows() - limit_.recent, 0));
}

CameraCache::Slot& CameraCache::slot(int iteration, int block) {
  LINGBOT_CHECK(
      iteration >= 0 && iteration < iterations_ && block >= 0 && block < depth_,
      "CameraCache: no slot (" + std::to_string(iteration) + ", " + std::to_string(block) + ")");
  return slots_[static_cast<size_t>(iteration) * depth_ + block];
}

const CameraCache::Slot& CameraCache::slot(int iteration, int block) const {
  return const_cast<CameraCache*>(this)->slot(iteration, block);
}

void CameraCache::append(int iteration, int block, const Tensor& k, const Tensor& v) {
  const int64_t n = k.numel() / (heads_ * head_dim_);
  LINGBOT_CHECK(
      k.numel() == n * heads_ * head_dim_ && v.numel() == k.numel(),
      "CameraCache::append: rows " + shape_str(k.shape()) + " do not match heads x head_dim");
  std::vector<KVDestination::Frame> to;
  reserve(iteration, block, n, to);
  const Tensor k2 = k.reshape({n, heads_, head_dim_}), v2 = v.reshape({n, heads_, head_dim_});
  for (int64_t f = 0; f < n; ++f)
    backend_->store_kv(k2.slice(f, f + 1), v2.slice(f, f + 1), to[f].k, to[f].v, dtype_);
}

void CameraCache::reserve(int iteration, int block, int64_t frames,
                          std::vector<KVDestination::Frame>& out) {
  LINGBOT_CHECK(frames >= 0, "CameraCache::reserve: a negative frame count");
  Slot& s = slot(iteration, block);
  // Rows join the pinned part only while it is short and nothing follows it.
  const int64_t pin =
      s.pinned && s.rest.rows() == 0 ? std::min(frames, limit_.pinned - s.pinned->rows()) : 0;
  std::vector<KVStream::RowSpan> spans;
  if (pin > 0) s.pinned->grow(pin, spans);
  if (pin < frames) s.rest.grow(frames - pin, spans);
  const size_t row = s.rest.row_bytes();
  for (const KVStream::RowSpan& span : spans)
    for (int64_t r = 0; r < span.rows; ++r)
      out.push_back({span.k + r * row, span.v + r * row, nullptr});
}

void CameraCache::segments(int iteration, int block, std::vector<KVSegment>& out) const {
  const Slot& s = slot(iteration, block);
  if (s.pinned) s.pinned->segments(out);
  s.rest.segments(out);
}

void CameraCache::truncate(int64_t frames) {
  int64_t longest = 0;
  for (const Slot& s : slots_) longest = std::max(longest, s.rows());
  LINGBOT_CHECK(frames >= 0 && frames <= longest, "CameraCache::truncate beyond its end");
  // Slots can differ in length only after a step failed half-way; min() restores them.
  for (Slot& s : slots_) {
    const int64_t pinned = s.pinned ? std::min(frames, s.pinned->rows()) : 0;
    if (s.pinned) s.pinned->truncate(pinned);
    s.rest.truncate(std::min(frames - pinned, s.rest.rows()));
  }
}

void CameraCache::rollback_last_frame() {
  LINGBOT_CHECK(rows() > 0, "CameraCache: rollback on an empty cache");
  truncate(rows() - 1);
}

CameraCache::Layout CameraCache::layout() const {
  const Slot& first = slots_.front();
  Layout l{first.rows(), first.pinned ? first.pinned->rows() : 0, first.rest.head()};
  for (const Slot& s : slots_)
    LINGBOT_CHECK(s.rows() == l.rows && (s.pinned ? s.pinned->rows() : 0) == l.pinned &&
                      s.rest.head() == l.rest_head,
                  "CameraCache: the slots differ (a snapshot between steps only)");
  return l;
}

void CameraCache::restore(const Layout& l) {
  const bool pins = limit_.recent > 0 && limit_.pinned > 0;
  LINGBOT_CHECK(l.rows >= 0 && l.pinned == (pins ? std::min(l.rows, limit_.pinned) : 0),
                "CameraCache: the saved rows do not fit this cache's limit");
  LINGBOT_CHECK(limit_.recent == 0 || l.rows - l.pinned <= limit_.recent + 1,
                "CameraCache: more saved rows than the limit keeps");
  truncate(0);
  for (Slot& s : slots_) s.rest.restart_at(l.rest_head);
}

size_t CameraCache::bytes_in_use() const {
  size_t n = 0;
  for (const Slot& s : slots_)
    n += (s.pinned ? s.pinned->bytes_in_use() : 0) + s.rest.bytes_in_use();
  return n;
}

size_t CameraCache::bytes_reserved() const {
  size_t n = 0;
  for (const Slot& s : slots_)
    n += (s.pinned ? s.pinned->bytes_reserved() : 0) + s.rest.bytes_reserved();
  return n;
}

size_t CameraCache::bytes_for(int64_t slots, int64_t row_elems, DType dtype, int64_t chunk_frames,
                              int64_t frames, const CameraCacheLimit& limit) {
  const size_t row = static_cast<size_t>(row_elems) * dtype_size(dtype) * 2;  // K+V
  int64_t rows = 0;
  if (limit.recent == 0) {
    rows = KVStream::chunks_for(frames, 0, 1, chunk_frames) * chunk_frames;
  } else {
    const int64_t pinned = std::min(frames, limit.pinned);
    // trim() leaves `recent` frames before each step stores one more.
    rows = (pinned > 0 ? limit.pinned : 0) +
           KVStream::chunks_for(frames - pinned, limit.recent + 1, 1, chunk_frames) * chunk_frames;
  }
  return static_cast<size_t>(slots) * static_cast<size_t>(rows) * row;
}

}  // namespace lingbot
