#include "cache/kv_stream.h"

#include <algorithm>

#include "lingbot/error.h"

namespace lingbot {

KVStream::KVStream(Backend& backend, int64_t heads, int64_t head_dim, DType dtype,
                   int64_t chunk_rows)
    : backend_(backend),
      heads_(heads),
      head_dim_(head_dim),
      dtype_(dtype),
      chunk_rows_(chunk_rows) {
  LINGBOT_CHECK(chunk_rows > 0 && heads > 0 && head_dim > 0, "KVStream: bad geometry");
}

void KVStream::append(const Tensor& k, const Tensor& v) {
  const int64_t n = k.numel() / (heads_ * head_dim_);
  LINGBOT_CHECK(
      k.numel() == n * heads_ * head_dim_ && v.numel() == k.numel(),
      "KVStream::append: rows " + shape_str(k.shape()) + " do not match heads x head_dim");
  const Tensor k2 = k.reshape({n, heads_, head_dim_}), v2 = v.reshape({n, heads_, head_dim_});
  std::vector<RowSpan> spans;
  grow(n, spans);
  int64_t done = 0;
  for (const RowSpan& s : spans) {
    backend_.store_kv(k2.slice(done, done + s.rows), v2.slice(done, done + s.rows), s.k, s.v,
                      dtype_);
    done += s.rows;
  }
}

void KVStream::grow(int64_t n, std::vector<RowSpan>& out) {
  LINGBOT_CHECK(n >= 0, "KVStream::grow by a negative count");
  while (n > 0) {
    const int64_t pos = head_ + rows_;
    const int64_t chunk = pos / chunk_rows_, offset = pos % chunk_rows_;
    if (chunk == static_cast<int64_t>(chunks_.size())) {
      if (!spare_.empty()) {
        chunks_.push_back(std::move(spare_.back()));
        spare_.pop_back();
      } else {
        chunks_.push_back({backend_.alloc({chunk_rows_, heads_, head_dim_}, dtype_),
                           backend_.alloc({chunk_rows_, heads_, head_dim_}, dtype_)});
      }
    }
    const int64_t take = std::min(n, chunk_rows_ - offset);
    const size_t at = static_cast<size_t>(offset) * row_bytes();
    out.push_back({static_cast<char*>(chunks_[chunk].k.raw()) + at,
                   static_cast<char*>(chunks_[chunk].v.raw()) + at, take});
    n -= take;
    rows_ += take;
  }
}

void KVStream::truncate(int64_t rows) {
  LINGBOT_CHECK(rows >= 0 && rows <= rows_, "KVStream::truncate beyond its end");
  rows_ = rows;
}

void KVStream::drop_front(int64_t n) {
  LINGBOT_CHECK(n >= 0 && n <= rows_, "KVStream::drop_front beyond its end");
  head_ += n;
  rows_ -= n;
  while (head_ >= chunk_rows_) {
    spare_.push_back(std::move(chunks_.front()));
    chunks_.pop_front();
    head_ -= chunk_rows_;
  }
}

void KVStream::clear() {
  rows_ = 0;
  head_ = 0;
}

void KVStream::restart_at(int64_t head) {
  LINGBOT_CHECK(head >= 0 && head < chunk_rows_, "KVStream::restart_at outside a chunk");
  clear();
  head_ = head;
}

void KVStream::segments(std::vector<KVSegment>& out) const {
  const size_t rb = row_bytes();
  for (int64_t pos = head_; pos < head_ + rows_;) {
    const Chunk& c = chunks_[pos / chunk_rows_];
    const int64_t offset = pos % chunk_rows_;
    const int64_t n = std::min(chunk_rows_ - offset, head_ + rows_ - pos);
    const size_t at = static_cast<size_t>(offset) * rb;
    out.push_back({static_cast<const char*>(c.k.raw()) + at,
                   static_cast<const char*>(c.v.raw()) + at, static_cast<int32_t>(n)});
    pos += n;
  }
}

size_t KVStream::bytes_for(int64_t rows) const {
  const int64_t chunks = (rows + chunk_rows_ - 1) / chunk_rows_;
  return static_cast<size_t>(chunks * chunk_rows_) * row_bytes() * 2;
}

int64_t KVStream::chunks_for(int64_t appended, int64_t keep, int64_t step, int64_t chunk_rows) {
  LINGBOT_CHECK(step > 0 && chunk_rows > 0 && keep >= 0, "KVStream::chunks_for: bad arguments");
  if (appended <= 0) return 0;
  if (keep == 0 || appended <= keep) return (appended + chunk_rows - 1) / chunk_rows;
  // Rows [b, e) are held after the append that ends at e; they span this many chunks.
  auto spanned = [&](int64_t e) {
    const int64_t b = std::max<int64_t>(e - keep, 0);
    return (e - 1) / chunk_rows - b / chunk_rows + 1;
  };
  // Untrimmed growth peaks at the last append that keeps everything; after it, the span depends
  // only on e modulo chunk_rows, which repeats within chunk_rows appends.
  const int64_t grown = keep / step * step;
  int64_t best = grown > 0 ? spanned(grown) : 0;
  int64_t e = grown + step;
  for (int64_t i = 0; i <= chunk_rows && e <= appended; ++i, e += step)
    best = std::max(best, spanned(e));
  return best;
}

}  // namespace lingbot
