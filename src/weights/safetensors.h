// safetensors: 8-byte little-endian header length, a JSON header, then raw tensor bytes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>

#include "weights/tensor_map.h"

namespace lingbot {

struct SafetensorsFile {
  TensorMap tensors;
  std::map<std::string, std::string> metadata;
};

// Memory-maps the file; tensors are views into the mapping (copied only when misaligned).
SafetensorsFile read_safetensors(const std::string& path);

// Parses a buffer; `owner` keeps `data` alive for the returned views. Every offset, shape and
// dtype is validated against the buffer, so untrusted bytes give an Error, never a bad read.
// `fp8`: F8_E4M3 tensors are read too (session snapshots; no checkpoint holds them, and the
// weight loader would refuse them).
SafetensorsFile parse_safetensors(const uint8_t* data, size_t size, std::shared_ptr<void> owner,
                                  const std::string& what = "buffer", bool fp8 = false);

// What precedes a file's tensor data: the header's length as 8 little-endian bytes, then the JSON
// header padded with spaces (which the format allows) to `size` bytes in all, or where `size` is 0
// to the next multiple of 8 so that the data stays aligned. Throws if the header needs more room.
std::string safetensors_prefix(std::string json, size_t size = 0);

// Writes host tensors (any dtype) in name order; the file is complete or absent afterwards.
void write_safetensors(const std::string& path, const TensorMap& tensors,
                       const std::map<std::string, std::string>& metadata = {});

}  // namespace lingbot
