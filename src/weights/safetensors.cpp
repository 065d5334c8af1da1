#include "weights/safetensors.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>
#include <unordered_map>
#include <vector>

#include "lingbot/error.h"
#include "weights/mapped_file.h"

namespace lingbot {
namespace {

bool parse_dtype(const std::string& s, DType* out) {
  static const std::unordered_map<std::string, DType> kNames = {
      {"F32", DType::F32}, {"F16", DType::F16},  {"BF16", DType::BF16}, {"F64", DType::F64},
      {"I64", DType::I64}, {"I32", DType::I32},  {"I16", DType::I16},   {"I8", DType::I8},
      {"U8", DType::U8},   {"BOOL", DType::Bool}};
  auto it = kNames.find(s);
  if (it == kNames.end()) return false;
  *out = it->second;
  return true;
}

constexpr uint64_t kMaxHeader = 100u << 20;  // the format's own limit

}  // namespace

SafetensorsFile parse_safetensors(const uint8_t* data, size_t size, std::shared_ptr<void> owner,
                                  const std::string& what, bool fp8) {
  auto fail = [&](const std::string& why) {
    return Error(what + ": not a valid safetensors file (" + why + ")");
  };
  if (size < 8) throw fail("shorter than its 8-byte header length");
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | data[i];
  if (n > kMaxHeader || n > size - 8)
    throw fail("header length " + std::to_string(n) + " exceeds the file");
  auto header = nlohmann::json::parse(data + 8, data + 8 + n, nullptr, /*allow_exceptions=*/false);
  if (header.is_discarded() || !header.is_object()) throw fail("header is not a JSON object");
  const uint8_t* body = data + 8 + n;
  const uint64_t body_size = size - 8 - n;

  SafetensorsFile file;
  for (auto& [name, entry] : header.items()) {
    if (name == "__metadata__") {
      if (!entry.is_object()) throw fail("__metadata__ is not an object");
      for (auto& [k, v] : entry.items()) {
        if (!v.is_string()) throw fail("metadata value of " + k + " is not a string");
        file.metadata[k] = v.get<std::string>();
      }
      continue;
    }
    if (!entry.is_object()) throw fail("entry " + name + " is not an object");
    auto dt = entry.find("dtype");
    auto sh = entry.find("shape");
    auto off = entry.find("data_offsets");
    if (dt == entry.end() || sh == entry.end() || off == entry.end() || !dt->is_string() ||
        !sh->is_array() || !off->is_array() || off->size() != 2)
      throw fail("entry " + name + " lacks dtype, shape or data_offsets");
    DType dtype;
    if (fp8 && dt->get<std::string>() == "F8_E4M3")
      dtype = DType::F8E4M3;
    else if (!parse_dtype(dt->get<std::string>(), &dtype))
      throw fail("tensor " + name + " has unsupported dtype " + dt->get<std::string>());
    Shape shape;
    uint64_t numel = 1;
    for (auto& d : *sh) {
      if (!d.is_number_unsigned()) throw fail("tensor " + name + " has a bad dimension");
      uint64_t v = d.get<uint64_t>();
      if (v > (1ull << 40) || (v && numel > (1ull << 50) / v))
        throw fail("tensor " + name + " is too large");
      numel *= v;
      shape.push_back(static_cast<int64_t>(v));
    }
    if (!(*off)[0].is_number_unsigned() || !(*off)[1].is_number_unsigned())
      throw fail("tensor " + name + " has bad data_offsets");
    uint64_t b = (*off)[0].get<uint64_t>(), e = (*off)[1].get<uint64_t>();
    if (b > e || e > body_size) throw fail("tensor " + name + " data lies outside the file");
    if (e - b != numel * dtype_size(dtype))
      throw fail("tensor " + name + " byte size does not match its shape " + shape_str(shape));
    const uint8_t* p = body + b;
    Tensor t;
    if (reinterpret_cast<uintptr_t>(p) % dtype_size(dtype) == 0) {
      t = Tensor::wrap(const_cast<uint8_t*>(p), shape, dtype, owner);
    } else {
      t = Tensor::zeros(shape, dtype);
      std::memcpy(t.raw(), p, e - b);
    }
    file.tensors[name] = std::move(t);
  }
  return file;
}

SafetensorsFile read_safetensors(const std::string& path) {
  MappedFile f = map_file(path);
  return parse_safetensors(f.data, f.size, f.owner, path);
}

std::string safetensors_prefix(std::string json, size_t size) {
  if (size == 0) size = 8 + (json.size() + 7) / 8 * 8;
  if (json.size() + 8 > size)
    throw Error("safetensors header of " + std::to_string(json.size()) + " bytes has no room in " +
                std::to_string(size));
  json.resize(size - 8, ' ');
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i)
    out[i] = static_cast<char>(static_cast<uint64_t>(json.size()) >> (8 * i));
  return out + json;
}

void write_safetensors(const std::string& path, const TensorMap& tensors,
                       const std::map<std::string, std::string>& metadata) {
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  uint64_t offset = 0;
  for (auto& [name, t] : tensors) {
    LINGBOT_CHECK(t.device() == Device::CPU, "write_safetensors needs host tensors (" + name + ")");
    header[name] = {{"dtype", dtype_name(t.dtype())},
                    {"shape", t.shape()},
                    {"data_offsets", {offset, offset + t.nbytes()}}};
    offset += t.nbytes();
  }
  const std::string h = safetensors_prefix(header.dump());
  std::string tmp = path + ".partial";
  FILE* f = std::fopen(tmp.c_str(), "wb");
  if (!f) throw Error("cannot write " + path + ": " + std::strerror(errno));
  bool ok = std::fwrite(h.data(), 1, h.size(), f) == h.size();
  for (auto& [name, t] : tensors)
    if (ok && t.nbytes()) ok = std::fwrite(t.raw(), 1, t.nbytes(), f) == t.nbytes();
  ok = (std::fclose(f) == 0) && ok;
  if (!ok || std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::remove(tmp.c_str());
    throw Error("cannot write " + path + " (disk full or not writable?)");
  }
}

}  // namespace lingbot
