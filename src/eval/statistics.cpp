// The statistics of an error array as evo prints them, and numpy's median.
#include "eval/statistics.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "lingbot/eval.h"

namespace lingbot::eval {

double median_of(std::vector<double>& v) {
  if (v.empty()) return 0;
  const size_t mid = v.size() / 2;
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(mid), v.end());
  const double upper = v[mid];
  if (v.size() % 2) return upper;
  return (upper + *std::max_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(mid))) / 2;
}

Stats statistics(const std::vector<double>& e) {
  Stats s;
  s.count = e.size();
  if (e.empty()) return s;
  const double n = static_cast<double>(e.size());
  for (double v : e) s.sse += v * v;
  s.rmse = std::sqrt(s.sse / n);
  s.mean = std::accumulate(e.begin(), e.end(), 0.0) / n;
  double var = 0;
  for (double v : e) var += (v - s.mean) * (v - s.mean);
  s.std = std::sqrt(var / n);  // numpy's default (population)
  s.min = *std::min_element(e.begin(), e.end());
  s.max = *std::max_element(e.begin(), e.end());
  std::vector<double> copy = e;
  s.median = median_of(copy);
  return s;
}

}  // namespace lingbot::eval
