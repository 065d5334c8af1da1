#include "backend/ops.h"

#include <cstring>

#include "lingbot/error.h"

namespace lingbot {

void Backend::download_into(const Tensor& t, float* host) {
  const Tensor h = download(t);
  LINGBOT_CHECK(h.numel() == t.numel(), "download_into: size mismatch");
  if (h.numel()) std::memcpy(host, h.f32(), static_cast<size_t>(h.numel()) * sizeof(float));
}

void Backend::attention_planned(const Tensor& q, int list, float scale, Tensor& out) {
  LINGBOT_CHECK(list >= 0 && list < static_cast<int>(planned_.size()),
                "attention_planned: list " + std::to_string(list) + " is not in the plan");
  attention(q, planned_[list], scale, out);
}

void Backend::upload_into(const Tensor& host, Tensor& dst) {
  LINGBOT_CHECK(host.numel() == dst.numel(),
                "upload_into: " + shape_str(host.shape()) + " into " + shape_str(dst.shape()));
  Tensor t = upload(host, dst.dtype());
  copy(t, dst);
}

}  // namespace lingbot
