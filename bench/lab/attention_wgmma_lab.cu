// The kernel lab's wgmma attention variants (built into the CUDA backend only with
// -DLINGBOT_KERNEL_LAB=ON): the diagnoses of enum Mode, which compute wrong results on purpose to
// time the kernel with one part removed (kNoLoad: the producer copies nothing; kNoSoftmax: S is
// packed as P without a softmax), on bf16 and on e4m3 K/V. Chosen with LINGBOT_ATTN_MODE, e.g.
// `LINGBOT_ATTN_MODE=84 lingbot_bench --benchmark_filter=PagedAttention` (84 = kDefault |
// kNoLoad); the release build's dispatch (attention_wgmma.cu) asks here for any mode it lacks.
#include "backend/cuda/attention_wgmma_kernel.cuh"

namespace lingbot::cuda::attn {

bool pick_lab_variant(int mode, Launch& l) {
  return pick<Cfg4x64, kDefault | kNoLoad, kDefault | kNoSoftmax, kDefault | kNoSoftmax | kNoLoad,
              kDefault | kF8 | kNoLoad, kDefault | kF8 | kNoSoftmax,
              kDefault | kF8 | kNoSoftmax | kNoLoad>(mode, l);
}

}  // namespace lingbot::cuda::attn
