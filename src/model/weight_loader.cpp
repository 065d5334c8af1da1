#include "model/weight_loader.h"

#include "lingbot/error.h"
#include "weights/synthetic.h"

namespace lingbot {

WeightLoader::WeightLoader(const TensorMap& tensors, Backend& backend, std::string source_name)
    : tensors_(&tensors), backend_(backend), source_(std::move(source_name)) {}

WeightLoader::WeightLoader(uint64_t seed, Backend& backend)
    : seed_(seed), backend_(backend), source_("synthetic:" + std::to_string(seed)) {}

Tensor WeightLoader::get_host(const std::string& name, const Shape& shape) {
  used_.insert(name);
  parameters_ += static_cast<size_t>(shape_numel(shape));
  if (seed_) {
    Tensor t = synthetic_tensor(*seed_, name, shape);
    if (record_) (*record_)[name] = t;
    return t;
  }
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
      break;
    default:
      throw Error(source_ + ": tensor " + name + " has non-float dtype " + dtype_name(t.dtype()));
  }
  return t.dtype() == DType::F32 ? t : t.to(DType::F32);
}

Tensor WeightLoader::get(const std::string& name, const Shape& shape, DType dtype) {
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
