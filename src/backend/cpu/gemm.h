// Row-major single-precision GEMM: C[M,N] = alpha * op(A) . op(B) + beta * C.
// Uses the system BLAS when the build found one, else a portable multi-threaded kernel.
#pragma once

namespace lingbot::cpu {

void sgemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* a, int lda,
           const float* b, int ldb, float beta, float* c, int ldc);

const char* blas_name();

}  // namespace lingbot::cpu
