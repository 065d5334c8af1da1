// Tensors: a contiguous block of one dtype on one device, shared ownership, cheap views.
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

namespace lingbot {

// F8E4M3: 8-bit float (4 exponent bits, 3 mantissa, no infinity, largest 448), the storage of
// the fp8 KV cache.
enum class DType : uint8_t { F32, F16, BF16, F64, I64, I32, I16, I8, U8, Bool, F8E4M3 };
enum class Device : uint8_t { CPU, CUDA };

size_t dtype_size(DType t);
const char* dtype_name(DType t);  // safetensors spelling: "F32", "BF16", ...

using Shape = std::vector<int64_t>;
std::string shape_str(const Shape& s);  // "[2, 3]"
int64_t shape_numel(const Shape& s);

// Always contiguous (row-major). Views share the owner of the memory they look into.
class Tensor {
 public:
  Tensor() = default;
  // Host memory, zero-filled.
  static Tensor zeros(Shape shape, DType dtype = DType::F32);
  // Wraps memory someone else owns; `owner` keeps it alive (may be null for borrowed memory).
  static Tensor wrap(void* data, Shape shape, DType dtype, std::shared_ptr<void> owner,
                     Device device = Device::CPU);

  bool defined() const { return data_ != nullptr || !shape_.empty(); }
  const Shape& shape() const { return shape_; }
  int rank() const { return static_cast<int>(shape_.size()); }
  int64_t dim(int i) const { return shape_[i < 0 ? i + rank() : i]; }
  int64_t numel() const { return shape_numel(shape_); }
  size_t nbytes() const { return static_cast<size_t>(numel()) * dtype_size(dtype_); }
  DType dtype() const { return dtype_; }
  Device device() const { return device_; }

  void* raw() const { return data_; }
  template <class T>
  T* data() const {
    return static_cast<T*>(data_);
  }
  float* f32() const;  // checks dtype

  // Same memory, another shape with the same element count.
  Tensor reshape(Shape shape) const;
  // Rows [begin, end) of dimension 0.
  Tensor slice(int64_t begin, int64_t end) const;
  // Element block i of dimension 0, with that dimension dropped.
  Tensor operator[](int64_t i) const;

  // Deep copy to a new host tensor converted to `dtype` (F32 <-> F16/BF16/F64/ints).
  Tensor to(DType dtype) const;

 private:
  std::shared_ptr<void> owner_;
  void* data_ = nullptr;
  Shape shape_;
  DType dtype_ = DType::F32;
  Device device_ = Device::CPU;
};

// Scalar conversions used by readers, writers and the GPU path.
float bf16_to_f32(uint16_t h);
uint16_t f32_to_bf16(float f);  // round to nearest even
float f16_to_f32(uint16_t h);
uint16_t f32_to_f16(float f);  // round to nearest even
float f8e4m3_to_f32(uint8_t b);
// Round to nearest even; beyond the largest finite value (448) it saturates, as the GPU's
// satfinite conversion does; NaN gives NaN.
uint8_t f32_to_f8e4m3(float f);

}  // namespace lingbot
