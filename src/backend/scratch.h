// The working memory the GPU backend takes for an op beyond the tensors it is given: its
// grow-only scratch block serves im2col columns, transposed-convolution scatters and split
// attention's partial outputs, and cuBLAS(Lt) gets one fixed workspace. The CUDA backend sizes
// these requests with the functions below, and the memory preflight adds the same numbers up.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>

namespace lingbot::scratch {

// conv2d builds its im2col columns in pixel chunks of at most this many floats (~256 MB), so the
// column buffer stays bounded at any resolution.
inline constexpr int64_t kIm2colChunkFloats = 64LL << 20;
// Split attention divides the keys at most this many ways.
inline constexpr int64_t kMaxAttentionSplits = 64;
// The GEMM libraries' workspace, allocated once.
inline constexpr size_t kGemmWorkspaceBytes = 32u << 20;
// The side queue's (Backend::begin_side): its GEMMs are the camera head's few-row products.
inline constexpr size_t kSideGemmWorkspaceBytes = 4u << 20;

// Pixels per im2col chunk of a conv2d with `kdim` = Ci * kh * kw values per output pixel.
inline int64_t im2col_chunk_pixels(int64_t kdim, int64_t pixels) {
  return std::max<int64_t>(1, std::min<int64_t>(pixels, kIm2colChunkFloats / kdim));
}
// Floats a conv2d with a k x k kernel over `ci` channels takes for `pixels` output pixels.
inline int64_t conv2d_floats(int64_t ci, int64_t k, int64_t pixels) {
  const int64_t kdim = ci * k * k;
  return kdim * im2col_chunk_pixels(kdim, pixels);
}
// The bf16 copy of a conv2d's weights [co, ci, k, k] that the GPU's implicit-GEMM convolution
// packs once and keeps ([co rounded up to 128][k k][ci]); 0 where that path does not apply (input
// channels not a multiple of 32, or a 1x1 kernel with fewer than 64 outputs: those run as a
// GEMM).
inline int64_t conv_packed_layout_elems(int64_t co, int64_t ci, int64_t taps) {
  return (co + 127) / 128 * 128 * ci * taps;  // room for any output-channel tile
}
inline bool conv_packs(int64_t co, int64_t ci, int64_t k) {
  return ci % 32 == 0 && (k > 1 || co >= 64);
}
inline int64_t conv_packed_elems(int64_t co, int64_t ci, int64_t k) {
  return conv_packs(co, ci, k) ? conv_packed_layout_elems(co, ci, k * k) : 0;
}
// Floats a transposed conv (kernel == stride == k) takes: the [co k k, pixels] scatter source.
inline int64_t conv_transpose2d_floats(int64_t co, int64_t k, int64_t pixels) {
  return co * k * k * pixels;
}
// Floats split attention takes at most for `queries` queries of `heads` x `head_dim`: every
// split's partial output and log-sum-exp.
inline int64_t attention_floats(int64_t queries, int64_t heads, int64_t head_dim) {
  return kMaxAttentionSplits * queries * heads * (head_dim + 1);
}

}  // namespace lingbot::scratch
