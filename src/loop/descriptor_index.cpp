// The place-descriptor index of loop detection: a flat table, scanned in full per query. At
// 2,048 floats a keyframe (the released model) a scan of 1,000 keyframes is 8 MB of reads,
// ~1 ms; the structure of an approximate index would cost more than it saves at these sizes.
#include <algorithm>

#include "lingbot/error.h"
#include "lingbot/loop.h"

namespace lingbot {

void DescriptorIndex::add(int64_t frame, const std::vector<float>& d) {
  LINGBOT_CHECK_ARG(!d.empty(), "descriptor index: an empty descriptor");
  LINGBOT_CHECK_ARG(dim_ == 0 || static_cast<int64_t>(d.size()) == dim_,
                    "descriptor index: descriptors of " + std::to_string(d.size()) +
                        " values beside ones of " + std::to_string(dim_));
  LINGBOT_CHECK_ARG(frames_.empty() || frame > frames_.back(),
                    "descriptor index: frames must be added in increasing order");
  dim_ = static_cast<int64_t>(d.size());
  frames_.push_back(frame);
  values_.insert(values_.end(), d.begin(), d.end());
}

std::vector<DescriptorIndex::Hit> DescriptorIndex::query(const std::vector<float>& d,
                                                         int64_t max_frame, int k,
                                                         float floor) const {
  std::vector<Hit> hits;
  if (k <= 0 || frames_.empty()) return hits;
  LINGBOT_CHECK_ARG(static_cast<int64_t>(d.size()) == dim_,
                    "descriptor index: a query of " + std::to_string(d.size()) +
                        " values against descriptors of " + std::to_string(dim_));
  // Frames are sorted: the eligible ones are a prefix.
  const auto end = std::upper_bound(frames_.begin(), frames_.end(), max_frame) - frames_.begin();
  for (int64_t i = 0; i < end; ++i) {
    const float* v = values_.data() + i * dim_;
    double dot = 0;
    for (int64_t j = 0; j < dim_; ++j) dot += double(v[j]) * d[j];
    if (dot >= floor) hits.push_back({frames_[i], static_cast<float>(dot)});
  }
  const auto better = [](const Hit& x, const Hit& y) {
    return x.similarity != y.similarity ? x.similarity > y.similarity : x.frame < y.frame;
  };
  if (static_cast<int64_t>(hits.size()) > k) {
    std::partial_sort(hits.begin(), hits.begin() + k, hits.end(), better);
    hits.resize(k);
  } else {
    std::sort(hits.begin(), hits.end(), better);
  }
  return hits;
}

}  // namespace lingbot
