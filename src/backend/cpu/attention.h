// Softmax attention on the CPU over a list of K/V segments, F32 throughout. Used by CpuBackend;
// the instruction-set choice and the exp2 are exposed for the unit tests.
#pragma once

#include <cstdint>
#include <vector>

#include "backend/ops.h"

namespace lingbot::cpu {

// Which kernels run: Auto takes AVX2+FMA where the processor has it and head_dim is a multiple
// of 8, else the portable C++ kernels (which any compiler vectorises as it can).
enum class AttentionIsa { Auto, Portable, Avx2 };

// True when `isa` can run on this processor (Auto and Portable always can).
bool attention_isa_available(AttentionIsa isa);

// out[nq, heads, dim] = softmax(q . K^T * scale) . V over all segments' tokens, where q and out
// are [nq, heads, dim] and each segment's K/V rows are [tokens, heads, dim], all F32, or e4m3
// with the segments' scales (host memory; see KVSegment). Avx2 with a head_dim that is not a
// multiple of 8 runs the portable kernels.
void attention(const float* q, int64_t nq, int64_t heads, int64_t dim,
               const std::vector<KVSegment>& kv, float scale, float* out,
               AttentionIsa isa = AttentionIsa::Auto);

// x[i] = 2^x[i] in place for x[i] <= 0, as the softmax computes it (values below -126 give 0).
void exp2_nonpositive(float* x, int64_t n, AttentionIsa isa = AttentionIsa::Auto);

}  // namespace lingbot::cpu
