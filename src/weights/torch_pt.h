// PyTorch checkpoints (torch.save) read without Python: the zip format of torch >= 1.6 and the
// older single-stream ("legacy") format. Only tensors and plain containers are understood; a
// file that names any other Python global is refused rather than trusted.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "weights/tensor_map.h"

namespace lingbot {

// Memory-maps the file; tensors are views into the mapping when aligned and contiguous, copies
// otherwise. A {'model': state_dict} wrapper is unwrapped and nested dicts flatten to dotted
// keys; non-tensor entries (epoch numbers, argument dicts) are dropped.
TensorMap read_torch_checkpoint(const std::string& path);

// The same from a buffer; `owner` keeps `data` alive for the returned views. Every offset, size
// and stride is checked against the buffer: untrusted bytes give an Error naming `what`.
TensorMap parse_torch_checkpoint(const uint8_t* data, size_t size, std::shared_ptr<void> owner,
                                 const std::string& what);

// For tests and fuzzing: a data.pkl payload alone, each storage it names standing for zero
// bytes of its declared size (capped, so a huge declaration stays cheap).
TensorMap parse_torch_pickle(const uint8_t* data, size_t size, const std::string& what);

}  // namespace lingbot
