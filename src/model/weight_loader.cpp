#include "model/weight_loader.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <vector>

#include "lingbot/error.h"
#include "weights/synthetic.h"

namespace lingbot {

WeightLoader::WeightLoader(const TensorMap& tensors, Backend& backend, std::string source_name)
    : tensors_(&tensors), backend_(backend), source_(std::move(source_name)) {
  // Ask the kernel to read every tensor's pages ahead, in file order, on a side thread: a cold
  // checkpoint then streams from disk while earlier tensors are converted and uploaded. Tensors
  // already in the page cache make this a cheap no-op. The thread holds the tensors (and so the
  // file mapping) until it ends.
  std::vector<Tensor> order;
  for (auto& [name, t] : tensors)
    if (t.device() == Device::CPU && t.nbytes()) order.push_back(t);
  std::sort(order.begin(), order.end(), [](const Tensor& a, const Tensor& b) {
    return reinterpret_cast<uintptr_t>(a.raw()) < reinterpret_cast<uintptr_t>(b.raw());
  });
  readahead_ = std::thread([this, order = std::move(order)] {
    const uintptr_t page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
    for (const Tensor& t : order) {
      if (stop_readahead_) return;
      const uintptr_t at = reinterpret_cast<uintptr_t>(t.raw()), begin = at & ~(page - 1);
      ::madvise(reinterpret_cast<void*>(begin), at + t.nbytes() - begin, MADV_WILLNEED);
    }
  });
}

WeightLoader::WeightLoader(uint64_t seed, Backend& backend)
    : seed_(seed), backend_(backend), source_("synthetic:" + std::to_string(seed)) {}

WeightLoader::~WeightLoader() {
  stop_readahead_ = true;
  if (readahead_.joinable()) readahead_.join();
}

const Tensor& WeightLoader::checked(const std::string& name, const Shape& shape) {
  used_.insert(name);
  parameters_ += static_cast<size_t>(shape_numel(shape));
  auto it = tensors_->find(name);
  if (it == tensors_->end()) throw Error(source_ + ": missing tensor " + name);
  const Tensor& t = it->second;
  if (t.shape() != shape)
    throw Error(source_ + ": tensor " + name + " has shape " + shape_str(t.shape()) +
                ", the model expects " + shape_str(shape));
  switch (t.dtype()) {
    case DType::F32:
    case DType::F16:
    case DType::BF16:
    case DType::F64:
      return t;
    default:
      throw Error(source_ + ": tensor " + name + " has non-float dtype " + dtype_name(t.dtype()));
  }
}

Tensor WeightLoader::get_host(const std::string& name, const Shape& shape) {
  if (seed_) {
    used_.insert(name);
    parameters_ += static_cast<size_t>(shape_numel(shape));
    Tensor t = synthetic_tensor(*seed_, name, shape);
    if (record_) (*record_)[name] = t;
    return t;
  }
  const Tensor& t = checked(name, shape);
  return t.dtype() == DType::F32 ? t : t.to(DType::F32);
}

Tensor WeightLoader::get(const std::string& name, const Shape& shape, DType dtype) {
  if (!seed_) {
    // F32, F16 and BF16 go to the backend as stored (a view of the file): it converts on the
    // device, and half-precision files move half the bytes.
    const Tensor& t = checked(name, shape);
    return backend_.upload(t.dtype() == DType::F64 ? t.to(DType::F32) : t, dtype);
  }
  return backend_.upload(get_host(name, shape), dtype);
}

void WeightLoader::ignore(const std::string& name) {
  used_.insert(name);
}

void WeightLoader::finish() const {
  if (!tensors_) return;
  std::string extra;
  int count = 0;
  for (auto& [name, t] : *tensors_) {
    if (used_.count(name)) continue;
    if (count < 5) extra += (count ? ", " : "") + name;
    ++count;
  }
  if (count)
    throw Error(source_ + ": " + std::to_string(count) + " unexpected tensor(s), e.g. " + extra +
                " (is this a LingBot-Map checkpoint of the chosen architecture?)");
}

}  // namespace lingbot
