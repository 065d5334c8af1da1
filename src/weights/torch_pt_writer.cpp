#include "weights/torch_pt_writer.h"

#include <zlib.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <vector>

#include "lingbot/error.h"

namespace lingbot {
namespace {

constexpr uint64_t kMax32 = 0xffffffffu;
constexpr uint64_t kAlign = 64;      // torch aligns tensor data so a mapping can be viewed in place
constexpr uint16_t kDosDate = 0x21;  // 1980-01-01: a fixed stamp keeps output reproducible

const char* storage_type(DType d) {
  switch (d) {
    case DType::F32:
      return "FloatStorage";
    case DType::F16:
      return "HalfStorage";
    case DType::BF16:
      return "BFloat16Storage";
    case DType::F64:
      return "DoubleStorage";
    case DType::I64:
      return "LongStorage";
    case DType::I32:
      return "IntStorage";
    case DType::I16:
      return "ShortStorage";
    case DType::I8:
      return "CharStorage";
    case DType::U8:
      return "ByteStorage";
    case DType::Bool:
      return "BoolStorage";
    case DType::F8E4M3:
      return "Float8_e4m3fnStorage";
  }
  return "ByteStorage";
}

// Little-endian byte string builder for pickle opcodes and zip records.
struct Bytes {
  std::string s;
  void u8(uint64_t v) { s.push_back(static_cast<char>(v & 0xff)); }
  void u16(uint64_t v) { le(v, 2); }
  void u32(uint64_t v) { le(v, 4); }
  void u64(uint64_t v) { le(v, 8); }
  void le(uint64_t v, int n) {
    for (int i = 0; i < n; ++i) u8(v >> (8 * i));
  }
  void str(const std::string& v) { s += v; }
};

// Pickle protocol 2, the subset torch.save emits for a state dict (no memo: it is optional).
struct Pickler {
  Bytes b;
  void global(const char* module, const char* name) {
    b.u8('c');
    b.str(std::string(module) + "\n" + name + "\n");
  }
  void text(const std::string& v) {
    b.u8('X');  // BINUNICODE
    b.u32(v.size());
    b.str(v);
  }
  void integer(int64_t v) {
    if (v >= 0 && v < 256) {
      b.u8('K');
      b.u8(v);
    } else if (v >= 0 && v < 65536) {
      b.u8('M');
      b.u16(v);
    } else if (v >= INT32_MIN && v <= INT32_MAX) {
      b.u8('J');
      b.u32(static_cast<uint32_t>(v));
    } else {
      b.u8(0x8a);  // LONG1: 8 bytes of two's complement
      b.u8(8);
      b.u64(static_cast<uint64_t>(v));
    }
  }
  void ints(const std::vector<int64_t>& v) {
    b.u8('(');
    for (int64_t x : v) integer(x);
    b.u8('t');
  }
  void empty_ordered_dict() {
    global("collections", "OrderedDict");
    b.u8(')');
    b.u8('R');
  }
};

// OrderedDict{name: _rebuild_tensor_v2(storage, 0, shape, stride, False, OrderedDict())}, with
// storage the persistent id ('storage', torch.<Type>Storage, key, 'cpu', numel).
std::string state_dict_pickle(const TensorMap& tensors) {
  Pickler p;
  p.b.u8(0x80);
  p.b.u8(2);
  p.empty_ordered_dict();
  p.b.u8('(');
  size_t key = 0;
  for (auto& [name, t] : tensors) {
    p.text(name);
    p.global("torch._utils", "_rebuild_tensor_v2");
    p.b.u8('(');
    p.b.u8('(');
    p.text("storage");
    p.global("torch", storage_type(t.dtype()));
    p.text(std::to_string(key++));
    p.text("cpu");
    p.integer(t.numel());
    p.b.u8('t');
    p.b.u8('Q');  // BINPERSID
    p.integer(0);
    p.ints(t.shape());
    std::vector<int64_t> stride(t.shape().size());
    int64_t s = 1;
    for (size_t d = stride.size(); d-- > 0;) {
      stride[d] = s;
      s *= t.shape()[d];
    }
    p.ints(stride);
    p.b.u8(0x89);  // NEWFALSE: requires_grad
    p.empty_ordered_dict();
    p.b.u8('t');
    p.b.u8('R');
  }
  p.b.u8('u');  // SETITEMS
  p.b.u8('.');
  return std::move(p.b.s);
}

struct Record {
  std::string name;
  const uint8_t* data;
  uint64_t size;
  uint32_t crc = 0;
  uint64_t offset = 0;  // of the local header
};

uint32_t crc_of(const uint8_t* p, uint64_t n) {
  return static_cast<uint32_t>(crc32_z(0, p, n));
}

}  // namespace

void write_torch_checkpoint(const std::string& path, const TensorMap& tensors, bool force_zip64) {
  const std::string pkl = state_dict_pickle(tensors);
  static const std::string kOrder = "little", kVersion = "3\n";
  auto bytes = [](const std::string& s) { return reinterpret_cast<const uint8_t*>(s.data()); };
  std::vector<Record> recs;
  recs.push_back({"archive/data.pkl", bytes(pkl), pkl.size()});
  recs.push_back({"archive/byteorder", bytes(kOrder), kOrder.size()});
  size_t key = 0;
  for (auto& [name, t] : tensors) {
    LINGBOT_CHECK(t.device() == Device::CPU,
                  "write_torch_checkpoint needs host tensors (" + name + ")");
    recs.push_back({"archive/data/" + std::to_string(key++), static_cast<const uint8_t*>(t.raw()),
                    t.nbytes()});
  }
  recs.push_back({"archive/version", bytes(kVersion), kVersion.size()});
  // CRC-32 at zlib's speed, records in parallel: it is most of the work besides the disk.
#pragma omp parallel for schedule(dynamic)
  for (size_t i = 0; i < recs.size(); ++i) recs[i].crc = crc_of(recs[i].data, recs[i].size);

  std::string tmp = path + ".partial";
  FILE* f = std::fopen(tmp.c_str(), "wb");
  if (!f) throw Error("cannot write " + path + ": " + std::strerror(errno));
  bool ok = true;
  uint64_t pos = 0;
  auto put = [&](const void* p, uint64_t n) {
    if (ok && n) ok = std::fwrite(p, 1, n, f) == n;
    pos += n;
  };
  for (Record& r : recs) {
    r.offset = pos;
    const bool big = force_zip64 || r.size >= kMax32;  // the local header needs 64-bit sizes
    Bytes extra;
    if (big) {
      extra.u16(0x0001);
      extra.u16(16);
      extra.u64(r.size);
      extra.u64(r.size);
    }
    // Pad with a private extra field so the data starts on a kAlign boundary.
    const uint64_t head = pos + 30 + r.name.size() + extra.s.size();
    uint64_t pad = (kAlign - (head + 4) % kAlign) % kAlign;
    extra.u16(0x4246);
    extra.u16(pad);
    extra.s.append(pad, 'Z');
    Bytes h;
    h.u32(0x04034b50);
    h.u16(big ? 45 : 20);
    h.u16(0);  // flags
    h.u16(0);  // stored
    h.u16(0);  // time
    h.u16(kDosDate);
    h.u32(r.crc);
    h.u32(big ? kMax32 : r.size);
    h.u32(big ? kMax32 : r.size);
    h.u16(r.name.size());
    h.u16(extra.s.size());
    h.str(r.name);
    h.str(extra.s);
    put(h.s.data(), h.s.size());
    put(r.data, r.size);
  }

  const uint64_t cd_offset = pos;
  bool zip64 = force_zip64 || recs.size() >= 0xffff;
  Bytes cd;
  for (const Record& r : recs) {
    const bool big_size = force_zip64 || r.size >= kMax32;
    const bool big_offset = force_zip64 || r.offset >= kMax32;
    const bool wide = big_size || big_offset;
    Bytes extra;
    if (wide) {
      extra.u16(0x0001);
      extra.u16(8 * (2 * big_size + big_offset));
      if (big_size) extra.u64(r.size), extra.u64(r.size);
      if (big_offset) extra.u64(r.offset);
      zip64 = true;
    }
    cd.u32(0x02014b50);
    cd.u16(wide ? 45 : 20);  // made by
    cd.u16(wide ? 45 : 20);  // needed
    cd.u16(0);
    cd.u16(0);
    cd.u16(0);
    cd.u16(kDosDate);
    cd.u32(r.crc);
    cd.u32(big_size ? kMax32 : r.size);
    cd.u32(big_size ? kMax32 : r.size);
    cd.u16(r.name.size());
    cd.u16(extra.s.size());
    cd.u16(0);  // comment
    cd.u16(0);  // disk
    cd.u16(0);  // internal attributes
    cd.u32(0);  // external attributes
    cd.u32(big_offset ? kMax32 : r.offset);
    cd.str(r.name);
    cd.str(extra.s);
  }
  const uint64_t cd_size = cd.s.size();
  zip64 = zip64 || cd_offset + cd_size >= kMax32;
  if (zip64) {
    const uint64_t end64 = cd_offset + cd_size;
    cd.u32(0x06064b50);
    cd.u64(44);  // size of the rest of this record
    cd.u16(45);
    cd.u16(45);
    cd.u32(0);
    cd.u32(0);
    cd.u64(recs.size());
    cd.u64(recs.size());
    cd.u64(cd_size);
    cd.u64(cd_offset);
    cd.u32(0x07064b50);  // locator
    cd.u32(0);
    cd.u64(end64);
    cd.u32(1);
  }
  // In zip64 form the 32-bit fields hold placeholders; readers take the 64-bit record.
  cd.u32(0x06054b50);
  cd.u16(0);
  cd.u16(0);
  cd.u16(zip64 ? 0xffff : recs.size());
  cd.u16(zip64 ? 0xffff : recs.size());
  cd.u32(zip64 ? kMax32 : cd_size);
  cd.u32(zip64 ? kMax32 : cd_offset);
  cd.u16(0);
  put(cd.s.data(), cd.s.size());

  ok = (std::fclose(f) == 0) && ok;
  if (!ok || std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::remove(tmp.c_str());
    throw Error("cannot write " + path + " (disk full or not writable?)");
  }
}

}  // namespace lingbot
