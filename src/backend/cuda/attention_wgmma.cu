// The wgmma attention kernel's release instantiations and their launch: the default mode on
// bf16 and on e4m3 K/V (attention_wgmma_kernel.cuh describes the kernel).
#include <algorithm>
#include <mutex>
#include <set>
#include <string>

#include "backend/cuda/attention_wgmma_kernel.cuh"

namespace lingbot::cuda::attn {

bool wgmma_supported(const Context& ctx) {
  return ctx.hopper;
}

void launch_wgmma(Context& ctx, KernelArgs& k, int forced_splits) {
  // LINGBOT_ATTN_MODE (backend/switches.h) names a variant of the kernel (enum Mode): a release
  // build has kDefault only (kF8 added for e4m3 K/V), a kernel-lab build the diagnoses too.
  int mode = switches().attn_mode ? switches().attn_mode : int(kDefault);
  if (k.kv_scales) mode |= kF8;  // e4m3 K/V: S on e4m3 and P.V on fp16
  Launch l{};
  const bool kv_matches = k.kv_scales || (mode & kF8) == 0;  // no e4m3 variant on bf16 K/V
  bool found = kv_matches && pick<Cfg4x64, kDefault, kDefault | kF8>(mode, l);
#ifdef LINGBOT_KERNEL_LAB
  if (!found && kv_matches) found = pick_lab_variant(mode, l);
#endif
  LINGBOT_CHECK(found, "LINGBOT_ATTN_MODE: no variant " + std::to_string(mode) +
                           " of the attention kernel (the diagnostic ones need a build with "
                           "-DLINGBOT_KERNEL_LAB=ON)");
  {
    static std::mutex mutex;  // engines on several threads may make their first call together
    static std::set<Kernel> configured;
    std::lock_guard<std::mutex> lock(mutex);
    if (!configured.count(l.kernel)) {
      LB_CUDA(cudaFuncSetAttribute(l.kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, l.smem));
      configured.insert(l.kernel);
    }
  }
  const int64_t qtiles = (k.nq + l.bm - 1) / l.bm;
  const int64_t tiles = (k.nk + l.bn - 1) / l.bn;
  int per_sm = 0;
  LB_CUDA(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, l.kernel, l.threads, l.smem));
  const int64_t slots = int64_t(std::max(1, per_sm)) * ctx.prop.multiProcessorCount;
  const int splits =
      forced_splits > 0 ? forced_splits : choose_splits(qtiles * k.heads, slots, tiles, 512 / l.bn);
  plan_splits(ctx, k, tiles, l.bn, splits);
  const dim3 grid(static_cast<unsigned>(qtiles), static_cast<unsigned>(k.heads),
                  static_cast<unsigned>(k.splits));
  launch_kernel(l.kernel, grid, l.threads, l.smem, ctx.stream, k);
}

}  // namespace lingbot::cuda::attn
