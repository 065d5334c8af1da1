// Row-major 3x3 matrices of doubles, as Sim(3) (sim3.cpp) and the loop edge's checks
// (loop_edge.cpp) use them for rotations.
#pragma once

#include <array>

namespace lingbot::mat3 {

using M3 = std::array<double, 9>;

inline M3 mul(const M3& a, const M3& b) {
  M3 c{};
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 3; ++j)
      for (int k = 0; k < 3; ++k) c[i * 3 + j] += a[i * 3 + k] * b[k * 3 + j];
  return c;
}

inline M3 transpose(const M3& a) {
  return {a[0], a[3], a[6], a[1], a[4], a[7], a[2], a[5], a[8]};
}

}  // namespace lingbot::mat3
