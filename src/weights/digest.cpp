#include "weights/digest.h"

#include <cstdio>
#include <cstring>
#include <vector>

namespace lingbot {
namespace {

constexpr uint64_t kP0 = 0x9E3779B97F4A7C15ull, kP1 = 0xC2B2AE3D27D4EB4Full,
                   kP2 = 0x165667B19E3779F9ull;

uint64_t rotl(uint64_t x, int r) {
  return (x << r) | (x >> (64 - r));
}

// A full-avalanche finalizer: every input bit flips each output bit with probability ~1/2.
uint64_t finalize(uint64_t x) {
  x ^= x >> 30;
  x *= 0xBF58476D1CE4E5B9ull;
  x ^= x >> 27;
  x *= 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

uint64_t load(const unsigned char* p) {
  uint64_t w;
  std::memcpy(&w, p, sizeof w);
  return w;
}

std::string hex(uint64_t h) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(h));
  return buf;
}

}  // namespace

uint64_t digest_bytes(const void* data, size_t bytes, uint64_t seed) {
  const auto* p = static_cast<const unsigned char*>(data);
  uint64_t lane[4] = {seed + kP0, seed ^ kP1, seed - kP0, ~seed};
  size_t i = 0;
  for (; i + 32 <= bytes; i += 32)
    for (int l = 0; l < 4; ++l) lane[l] = rotl(lane[l] + load(p + i + 8 * l) * kP1, 31) * kP0;
  uint64_t h = rotl(lane[0], 1) + rotl(lane[1], 7) + rotl(lane[2], 12) + rotl(lane[3], 18) + bytes;
  for (; i + 8 <= bytes; i += 8) h = rotl(h ^ finalize(load(p + i)), 27) * kP0 + kP2;
  for (; i < bytes; ++i) h = rotl(h ^ (p[i] * kP2), 11) * kP1;
  return finalize(h);
}

std::string weights_digest(const TensorMap& tensors) {
  std::vector<const std::pair<const std::string, Tensor>*> items;
  for (const auto& item : tensors) items.push_back(&item);  // in name order
  std::vector<uint64_t> per(items.size());
  const int64_t n = static_cast<int64_t>(items.size());
#pragma omp parallel for schedule(dynamic)
  for (int64_t i = 0; i < n; ++i) {
    const auto& [name, t] = *items[i];
    std::string key = name + '\0' + dtype_name(t.dtype()) + shape_str(t.shape());
    per[i] = digest_bytes(t.raw(), t.nbytes(), digest_bytes(key.data(), key.size()));
  }
  uint64_t h = digest_bytes(per.data(), per.size() * sizeof(uint64_t), n);
  return hex(h);
}

std::string synthetic_weights_digest(uint64_t seed) {
  const std::string key = "synthetic v1 seed " + std::to_string(seed);
  return hex(digest_bytes(key.data(), key.size()));
}

}  // namespace lingbot
