#include "cache/kv_stream.h"

#include <algorithm>

#include "lingbot/error.h"

namespace lingbot {

KVStream::KVStream(Backend& backend, int64_t heads, int64_t head_dim, DType dtype,
                   int64_t chunk_rows)
    : backend_(backend), heads_(heads), head_dim_(head_dim), dtype_(dtype), chunk_rows_(chunk_rows) {
  LINGBOT_CHECK(chunk_rows > 0 && heads > 0 && head_dim > 0, "KVStream: bad geometry");
}

void KVStream::append(const Tensor& k, const Tensor& v) {
  const int64_t n = k.numel() / (heads_ * head_dim_);
  LINGBOT_CHECK(k.numel() == n * heads_ * head_dim_ && v.numel() == k.numel(),
                "KVStream::append: rows " + shape_str(k.shape()) + " do not match heads x head_dim");
  Tensor k2 = k.reshape({n, heads_, head_dim_}), v2 = v.reshape({n, heads_, head_dim_});
  int64_t done = 0;
  while (done < n) {
    const int64_t chunk = rows_ / chunk_rows_, offset = rows_ % chunk_rows_;
    if (chunk == static_cast<int64_t>(chunks_.size())) {
      chunks_.push_back({backend_.alloc({chunk_rows_, heads_, head_dim_}, dtype_),
                         backend_.alloc({chunk_rows_, heads_, head_dim_}, dtype_)});
    }
    const int64_t take = std::min(n - done, chunk_rows_ - offset);
    const size_t at = static_cast<size_t>(offset) * row_bytes();
    backend_.store_kv(k2.slice(done, done + take), v2.slice(done, done + take),
                      static_cast<char*>(chunks_[chunk].k.raw()) + at,
                      static_cast<char*>(chunks_[chunk].v.raw()) + at, dtype_);
    done += take;
    rows_ += take;
  }
}

void KVStream::truncate(int64_t rows) {
  LINGBOT_CHECK(rows >= 0 && rows <= rows_, "KVStream::truncate beyond its end");
  rows_ = rows;
}

void KVStream::segments(std::vector<KVSegment>& out) const {
  for (int64_t start = 0; start < rows_; start += chunk_rows_) {
    const Chunk& c = chunks_[start / chunk_rows_];
    out.push_back({c.k.raw(), c.v.raw(), static_cast<int32_t>(std::min(chunk_rows_, rows_ - start))});
  }
}

size_t KVStream::bytes_for(int64_t rows) const {
  const int64_t chunks = (rows + chunk_rows_ - 1) / chunk_rows_;
  return static_cast<size_t>(chunks * chunk_rows_) * row_bytes() * 2;
}

}  // namespace lingbot
