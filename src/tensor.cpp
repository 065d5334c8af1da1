#include "lingbot/tensor.h"

#include <sys/mman.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>

#include "lingbot/error.h"

namespace lingbot {

size_t dtype_size(DType t) {
  switch (t) {
    case DType::F64:
    case DType::I64:
      return 8;
    case DType::F32:
    case DType::I32:
      return 4;
    case DType::F16:
    case DType::BF16:
    case DType::I16:
      return 2;
    case DType::I8:
    case DType::U8:
    case DType::Bool:
    case DType::F8E4M3:
      return 1;
  }
  return 0;
}

const char* dtype_name(DType t) {
  switch (t) {
    case DType::F32:
      return "F32";
    case DType::F16:
      return "F16";
    case DType::BF16:
      return "BF16";
    case DType::F64:
      return "F64";
    case DType::I64:
      return "I64";
    case DType::I32:
      return "I32";
    case DType::I16:
      return "I16";
    case DType::I8:
      return "I8";
    case DType::U8:
      return "U8";
    case DType::Bool:
      return "BOOL";
    case DType::F8E4M3:
      return "F8_E4M3";
  }
  return "?";
}

std::string shape_str(const Shape& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

int64_t shape_numel(const Shape& s) {
  int64_t n = 1;
  for (int64_t d : s) n *= d;
  return n;
}

Tensor Tensor::zeros(Shape shape, DType dtype) {
  for (int64_t d : shape) LINGBOT_CHECK(d >= 0, "negative tensor dimension " + shape_str(shape));
  size_t bytes = static_cast<size_t>(shape_numel(shape)) * dtype_size(dtype);
  Tensor t;
  void* p = nullptr;
  if (bytes >= (1u << 20)) {
    // Large blocks come zeroed from the kernel and cost memory only once touched: a KV-cache
    // pool sized for a full window takes RAM only as frames fill it.
    p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
      throw Error("out of host memory allocating " + std::to_string(bytes) + " bytes");
    t.owner_ = std::shared_ptr<void>(p, [bytes](void* q) { ::munmap(q, bytes); });
  } else {
    // 64-byte alignment keeps SIMD loads and BLAS happy.
    const size_t alloc = ((bytes + 63) / 64) * 64;
    p = std::aligned_alloc(64, alloc ? alloc : 64);
    if (!p) throw Error("out of host memory allocating " + std::to_string(bytes) + " bytes");
    std::memset(p, 0, alloc ? alloc : 64);
    t.owner_ = std::shared_ptr<void>(p, std::free);
  }
  t.data_ = p;
  t.shape_ = std::move(shape);
  t.dtype_ = dtype;
  return t;
}

Tensor Tensor::wrap(void* data, Shape shape, DType dtype, std::shared_ptr<void> owner,
                    Device device) {
  Tensor t;
  t.owner_ = std::move(owner);
  t.data_ = data;
  t.shape_ = std::move(shape);
  t.dtype_ = dtype;
  t.device_ = device;
  return t;
}

float* Tensor::f32() const {
  LINGBOT_CHECK(dtype_ == DType::F32, std::string("expected an F32 tensor, got ") +
                                          dtype_name(dtype_) + " " + shape_str(shape_));
  return static_cast<float*>(data_);
}

Tensor Tensor::reshape(Shape shape) const {
  int64_t infer = -1, known = 1;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == -1) {
      infer = static_cast<int64_t>(i);
    } else {
      known *= shape[i];
    }
  }
  if (infer >= 0) shape[infer] = known ? numel() / known : 0;
  LINGBOT_CHECK(shape_numel(shape) == numel(),
                "cannot reshape " + shape_str(shape_) + " to " + shape_str(shape));
  Tensor t = *this;
  t.shape_ = std::move(shape);
  return t;
}

Tensor Tensor::slice(int64_t begin, int64_t end) const {
  LINGBOT_CHECK(rank() >= 1 && begin >= 0 && begin <= end && end <= shape_[0],
                "slice [" + std::to_string(begin) + ", " + std::to_string(end) + ") out of " +
                    shape_str(shape_));
  Tensor t = *this;
  size_t row = (numel() / (shape_[0] ? shape_[0] : 1)) * dtype_size(dtype_);
  t.data_ = static_cast<char*>(data_) + begin * row;
  t.shape_[0] = end - begin;
  return t;
}

Tensor Tensor::operator[](int64_t i) const {
  Tensor t = slice(i, i + 1);
  t.shape_.erase(t.shape_.begin());
  return t;
}

namespace {
double load_as_double(const void* p, DType t, int64_t i) {
  switch (t) {
    case DType::F32:
      return static_cast<const float*>(p)[i];
    case DType::F16:
      return f16_to_f32(static_cast<const uint16_t*>(p)[i]);
    case DType::BF16:
      return bf16_to_f32(static_cast<const uint16_t*>(p)[i]);
    case DType::F64:
      return static_cast<const double*>(p)[i];
    case DType::I64:
      return static_cast<double>(static_cast<const int64_t*>(p)[i]);
    case DType::I32:
      return static_cast<const int32_t*>(p)[i];
    case DType::I16:
      return static_cast<const int16_t*>(p)[i];
    case DType::I8:
      return static_cast<const int8_t*>(p)[i];
    case DType::U8:
    case DType::Bool:
      return static_cast<const uint8_t*>(p)[i];
    case DType::F8E4M3:
      return f8e4m3_to_f32(static_cast<const uint8_t*>(p)[i]);
  }
  return 0;
}

void store_from_double(void* p, DType t, int64_t i, double v) {
  switch (t) {
    case DType::F32:
      static_cast<float*>(p)[i] = static_cast<float>(v);
      break;
    case DType::F16:
      static_cast<uint16_t*>(p)[i] = f32_to_f16(static_cast<float>(v));
      break;
    case DType::BF16:
      static_cast<uint16_t*>(p)[i] = f32_to_bf16(static_cast<float>(v));
      break;
    case DType::F64:
      static_cast<double*>(p)[i] = v;
      break;
    case DType::I64:
      static_cast<int64_t*>(p)[i] = static_cast<int64_t>(v);
      break;
    case DType::I32:
      static_cast<int32_t*>(p)[i] = static_cast<int32_t>(v);
      break;
    case DType::I16:
      static_cast<int16_t*>(p)[i] = static_cast<int16_t>(v);
      break;
    case DType::I8:
      static_cast<int8_t*>(p)[i] = static_cast<int8_t>(v);
      break;
    case DType::U8:
      static_cast<uint8_t*>(p)[i] = static_cast<uint8_t>(v);
      break;
    case DType::Bool:
      static_cast<uint8_t*>(p)[i] = v != 0;
      break;
    case DType::F8E4M3:
      static_cast<uint8_t*>(p)[i] = f32_to_f8e4m3(static_cast<float>(v));
      break;
  }
}
}  // namespace

Tensor Tensor::to(DType dtype) const {
  LINGBOT_CHECK(device_ == Device::CPU, "Tensor::to needs a host tensor");
  Tensor out = zeros(shape_, dtype);
  int64_t n = numel();
  if (dtype == dtype_) {
    std::memcpy(out.data_, data_, nbytes());
  } else {
    for (int64_t i = 0; i < n; ++i)
      store_from_double(out.data_, dtype, i, load_as_double(data_, dtype_, i));
  }
  return out;
}

float bf16_to_f32(uint16_t h) {
  uint32_t u = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

uint16_t f32_to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40);  // NaN
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

float f8e4m3_to_f32(uint8_t b) {
  const int e = (b >> 3) & 15, m = b & 7;
  float a;
  if (e == 15 && m == 7)
    a = std::numeric_limits<float>::quiet_NaN();
  else if (e == 0)
    a = std::ldexp(static_cast<float>(m), -9);  // subnormal: m/8 * 2^-6
  else
    a = std::ldexp(1.f + static_cast<float>(m) / 8.f, e - 7);
  return (b & 0x80) ? -a : a;
}

uint8_t f32_to_f8e4m3(float f) {
  if (std::isnan(f)) return 0x7f;
  const uint8_t sign = std::signbit(f) ? 0x80 : 0;
  const float a = std::fabs(f);
  if (a >= 448.f) return sign | 0x7e;  // satfinite
  if (a < 0x1p-6f) {
    // Subnormals are multiples of 2^-9 (exact in float: a power-of-two scaling); code 8 is the
    // smallest normal, which the count reaches by itself.
    return sign | static_cast<uint8_t>(std::nearbyint(a * 512.f));
  }
  int e;
  const float mant = std::frexp(a, &e) * 2.f;  // a = mant * 2^(e - 1), mant in [1, 2)
  int q = static_cast<int>(std::nearbyint((mant - 1.f) * 8.f));  // exact, then to nearest even
  int ex = e - 1 + 7;
  if (q == 8) {
    q = 0;
    ++ex;
  }
  return sign | static_cast<uint8_t>(ex << 3 | q);
}

float f16_to_f32(uint16_t h) {
  uint32_t sign = (h & 0x8000u) << 16, exp = (h >> 10) & 0x1fu, man = h & 0x3ffu, u;
  if (exp == 0) {
    if (man == 0) {
      u = sign;
    } else {  // subnormal: renormalize
      int e = -1;
      do {
        ++e;
        man <<= 1;
      } while (!(man & 0x400u));
      u = sign | static_cast<uint32_t>(127 - 15 - e) << 23 | (man & 0x3ffu) << 13;
    }
  } else if (exp == 31) {
    u = sign | 0x7f800000u | man << 13;
  } else {
    u = sign | (exp + 112) << 23 | man << 13;
  }
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

uint16_t f32_to_f16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  uint32_t sign = (u >> 16) & 0x8000u;
  uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u);
  if (a >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // overflow -> inf
  if (a < 0x38800000u) {                                               // subnormal or zero
    float m = std::fabs(f) * 16777216.0f;                              // 2^24
    return static_cast<uint16_t>(sign | static_cast<uint32_t>(std::nearbyint(m)));
  }
  uint32_t r = a + 0xfffu + ((a >> 13) & 1u) - (112u << 23);
  return static_cast<uint16_t>(sign | (r >> 13));
}

}  // namespace lingbot
