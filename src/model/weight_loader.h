// Hands model components their tensors by checkpoint key, checked and uploaded to the backend.
// Loading is strict: a missing key or a wrong shape throws naming the key, and finish() reports
// checkpoint keys that no component asked for.
#pragma once

#include <atomic>
#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <thread>

#include "backend/ops.h"
#include "weights/tensor_map.h"

namespace lingbot {

class WeightLoader {
 public:
  // From a checkpoint's tensors.
  WeightLoader(const TensorMap& tensors, Backend& backend, std::string source_name);
  // From synthetic weights v1 with this seed (every requested key exists).
  WeightLoader(uint64_t seed, Backend& backend);
  ~WeightLoader();
  WeightLoader(const WeightLoader&) = delete;
  WeightLoader& operator=(const WeightLoader&) = delete;

  // The tensor `name` with exactly `shape`, converted to `dtype` on the backend.
  Tensor get(const std::string& name, const Shape& shape, DType dtype = DType::F32);
  // Host F32 copy (for tables computed on the host, e.g. the positional embedding).
  Tensor get_host(const std::string& name, const Shape& shape);
  // Marks keys that a checkpoint may carry but the model does not use.
  void ignore(const std::string& name);

  // Throws if the checkpoint has keys nobody requested or ignored.
  void finish() const;

  // Keeps a host copy of every tensor handed out under its key (to write synthetic weights as a
  // checkpoint).
  void record_into(TensorMap* out) { record_ = out; }

  Backend& backend() { return backend_; }
  size_t parameters() const { return parameters_; }

 private:
  // The checkpoint tensor `name`, checked for existence, shape and a float dtype; counted as used.
  const Tensor& checked(const std::string& name, const Shape& shape);

  const TensorMap* tensors_ = nullptr;
  std::optional<uint64_t> seed_;
  Backend& backend_;
  std::string source_;
  std::set<std::string> used_;
  size_t parameters_ = 0;
  TensorMap* record_ = nullptr;
  std::atomic<bool> stop_readahead_{false};
  std::thread readahead_;  // page-cache read-ahead of the checkpoint's tensors
};

}  // namespace lingbot
