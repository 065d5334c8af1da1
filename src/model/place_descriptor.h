// A global place descriptor per frame from what the step computes anyway: the DINO trunk's
// output tokens (after its final norm), mean-pooled over the patch tokens and over the register
// tokens on the device, then L2-normalised on the host. No second network: loop detection
// retrieves candidate frames by the cosine of these vectors and verifies them on the images.
#pragma once

#include <cstdint>
#include <map>

#include "backend/ops.h"
#include "model/config.h"

namespace lingbot {

class PlaceDescriptor {
 public:
  // Queues the pooling of `trunk` ([S, 1 + R + Np, C] F32: cls, registers, patches, as
  // DinoTrunk::enqueue returns it) and returns the device result [S, C, 2]: column 0 the mean
  // of the patch tokens, column 1 the mean of the register tokens. Two existing ops per frame
  // (a transpose, then a product with a fixed [2, tokens] averaging matrix), so every backend
  // computes it the same way. Valid until the next call.
  const Tensor& enqueue(Backend& b, const Tensor& trunk, int64_t registers);

  // The pooled pair of one frame ([C, 2] as enqueue lays it out, host) -> a unit vector of 2C
  // floats: each mean L2-normalised, concatenated, times 1/sqrt(2). A zero mean stays zero.
  static void finish(const float* pooled, int64_t width, float* out);

  // For the memory preflight: what a call over `frames` frames of `tokens` trunk tokens keeps.
  static size_t work_bytes_for(const ModelConfig& cfg, int64_t frames, int64_t tokens);

  void release_buffers() { work_.clear(); }
  // Whether a call of this shape finds its buffers allocated (a step that would allocate them
  // must not be recorded, as for the aggregator's).
  bool ready(int64_t frames, int64_t tokens) const { return work_.count({frames, tokens}) > 0; }

 private:
  struct Work {
    Tensor weights;     // [2, tokens] F32: 1/Np over the patch rows, 1/R over the register rows
    Tensor transposed;  // [C, tokens] F32, one frame at a time (ops run in order)
    Tensor out;         // [S, C, 2] F32
  };
  std::map<std::pair<int64_t, int64_t>, Work> work_;  // (frames, tokens)
};

}  // namespace lingbot
