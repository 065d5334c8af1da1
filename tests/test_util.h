// Shared helpers for tests: where the reference fixtures are, and how close is close enough.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <string>

#include "lingbot/tensor.h"

namespace lingbot::test {

inline std::string fixtures_dir() {
  const char* env = std::getenv("LINGBOT_FIXTURES");
  return env && *env ? env : LINGBOT_DEFAULT_FIXTURES;
}

// The fixtures README's measure: largest absolute error over largest absolute reference value.
struct Agreement {
  double max_abs_err = 0, max_abs_ref = 0;
  double relative() const { return max_abs_ref > 0 ? max_abs_err / max_abs_ref : max_abs_err; }
};

inline Agreement compare(const Tensor& got, const Tensor& want) {
  Tensor g = got.to(DType::F32), w = want.to(DType::F32);
  Agreement a;
  EXPECT_EQ(g.numel(), w.numel()) << shape_str(got.shape()) << " vs " << shape_str(want.shape());
  const int64_t n = std::min(g.numel(), w.numel());
  for (int64_t i = 0; i < n; ++i) {
    const double gv = g.f32()[i], wv = w.f32()[i];
    const double err = std::isfinite(gv) && std::isfinite(wv) ? std::fabs(gv - wv)
                       : (gv == wv ? 0.0 : INFINITY);
    a.max_abs_err = std::max(a.max_abs_err, err);
    a.max_abs_ref = std::max(a.max_abs_ref, std::fabs(wv));
  }
  return a;
}

}  // namespace lingbot::test
