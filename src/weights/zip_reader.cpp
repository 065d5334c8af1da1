#include "weights/zip_reader.h"

#include <zlib.h>

#include <functional>

#include "lingbot/error.h"

namespace lingbot {
namespace {

constexpr uint32_t kLocalSig = 0x04034b50;
constexpr uint32_t kCentralSig = 0x02014b50;
constexpr uint32_t kEndSig = 0x06054b50;
constexpr uint32_t kEnd64Sig = 0x06064b50;
constexpr uint32_t kEnd64LocatorSig = 0x07064b50;
constexpr size_t kEndSize = 22, kEnd64Size = 56, kLocatorSize = 20, kCentralSize = 46,
                 kLocalSize = 30;

// Little-endian reads; callers have already checked that the bytes exist.
uint16_t u16(const uint8_t* p) {
  return static_cast<uint16_t>(p[0] | p[1] << 8);
}
uint32_t u32(const uint8_t* p) {
  return u16(p) | static_cast<uint32_t>(u16(p + 2)) << 16;
}
uint64_t u64(const uint8_t* p) {
  return u32(p) | static_cast<uint64_t>(u32(p + 4)) << 32;
}

// True when [offset, offset + len) lies inside a buffer of `size` bytes, without overflow.
bool fits(uint64_t offset, uint64_t len, uint64_t size) {
  return offset <= size && len <= size - offset;
}

struct Directory {
  uint64_t entries, offset, size;
};

Directory find_directory(const uint8_t* data, size_t size, const std::string& what) {
  auto fail = [&](const std::string& why) {
    return Error(what + ": not a valid zip archive (" + why + ")");
  };
  if (size < kEndSize) throw fail("too short for an end-of-directory record");
  // The end record sits before a comment of at most 65535 bytes; scan back for its signature.
  const size_t lowest = size - kEndSize > 0xffff ? size - kEndSize - 0xffff : 0;
  size_t pos = size - kEndSize;
  for (;; --pos) {
    if (u32(data + pos) == kEndSig && u16(data + pos + 20) <= size - kEndSize - pos) break;
    if (pos == lowest) throw fail("no end-of-directory record; the file may be truncated");
  }
  const uint8_t* end = data + pos;
  Directory d{u16(end + 10), u32(end + 16), u32(end + 12)};
  if (u16(end + 4) != 0 || u16(end + 6) != 0) throw fail("multi-part archives are not supported");

  // Zip64: a locator just before the end record points at the 64-bit end record.
  if (pos >= kLocatorSize && u32(end - kLocatorSize) == kEnd64LocatorSig) {
    const uint64_t off = u64(end - kLocatorSize + 8);
    if (!fits(off, kEnd64Size, pos - kLocatorSize) || u32(data + off) != kEnd64Sig)
      throw fail("zip64 end-of-directory record is missing or out of place");
    const uint8_t* e64 = data + off;
    if (u32(e64 + 16) != 0 || u32(e64 + 20) != 0)
      throw fail("multi-part archives are not supported");
    const Directory d64 = {u64(e64 + 32), u64(e64 + 48), u64(e64 + 40)};
    // A 32-bit field is either the zip64 placeholder or a copy of the 64-bit value.
    if ((d.entries != 0xffff && d.entries != d64.entries) ||
        (d.offset != 0xffffffffu && d.offset != d64.offset) ||
        (d.size != 0xffffffffu && d.size != d64.size))
      throw fail("the zip64 and 32-bit end-of-directory records disagree");
    d = d64;
  } else if (d.entries == 0xffff || d.offset == 0xffffffffu || d.size == 0xffffffffu) {
    throw fail("zip64 sizes without a zip64 end-of-directory record");
  }
  if (!fits(d.offset, d.size, size)) throw fail("central directory lies outside the file");
  if (d.entries > d.size / kCentralSize)
    throw fail("central directory is too small for its entries");
  return d;
}

// Replaces the 32-bit fields that hold 0xffffffff with the values of the zip64 extra field.
void apply_zip64_extra(const uint8_t* extra, size_t len, bool need_size, bool need_stored,
                       bool need_offset, ZipEntry* e, uint64_t* local_offset,
                       const std::function<Error(const std::string&)>& fail) {
  size_t p = 0;
  while (p + 4 <= len) {
    const uint16_t id = u16(extra + p), n = u16(extra + p + 2);
    if (n > len - p - 4) throw fail("extra field of " + e->name + " overruns its header");
    if (id == 0x0001) {
      const uint8_t* f = extra + p + 4;
      size_t used = 0;
      auto take = [&](uint64_t* out) {
        if (used + 8 > n) throw fail("zip64 field of " + e->name + " is too short");
        *out = u64(f + used);
        used += 8;
      };
      if (need_size) take(&e->size);
      if (need_stored) take(&e->stored_size);
      if (need_offset) take(local_offset);
      return;
    }
    p += 4 + size_t{n};
  }
  if (need_size || need_stored || need_offset)
    throw fail("entry " + e->name + " needs a zip64 field but has none");
}

}  // namespace

std::vector<ZipEntry> read_zip_directory(const uint8_t* data, size_t size,
                                         const std::string& what) {
  const std::function<Error(const std::string&)> fail = [&](const std::string& why) {
    return Error(what + ": not a valid zip archive (" + why + ")");
  };
  const Directory dir = find_directory(data, size, what);
  std::vector<ZipEntry> out;
  out.reserve(dir.entries);
  const uint8_t* cd = data + dir.offset;
  uint64_t p = 0;
  for (uint64_t i = 0; i < dir.entries; ++i) {
    if (!fits(p, kCentralSize, dir.size) || u32(cd + p) != kCentralSig)
      throw fail("central directory entry " + std::to_string(i) + " is damaged");
    const uint8_t* h = cd + p;
    const uint64_t name_len = u16(h + 28), extra_len = u16(h + 30), comment_len = u16(h + 32);
    if (!fits(p + kCentralSize, name_len + extra_len + comment_len, dir.size))
      throw fail("central directory entry " + std::to_string(i) + " overruns the directory");
    ZipEntry e;
    e.name.assign(reinterpret_cast<const char*>(h + kCentralSize), name_len);
    e.flags = u16(h + 8);
    e.method = u16(h + 10);
    e.crc32 = u32(h + 16);
    e.stored_size = u32(h + 20);
    e.size = u32(h + 24);
    uint64_t local = u32(h + 42);
    const bool big_size = e.size == 0xffffffffu, big_stored = e.stored_size == 0xffffffffu,
               big_offset = local == 0xffffffffu;
    if (big_size || big_stored || big_offset)
      apply_zip64_extra(h + kCentralSize + name_len, extra_len, big_size, big_stored, big_offset,
                        &e, &local, fail);
    p += kCentralSize + name_len + extra_len + comment_len;

    // The data starts after the local header, whose name and extra lengths may differ from the
    // central directory's (torch pads the local extra field to align tensor data).
    if (!fits(local, kLocalSize, size) || u32(data + local) != kLocalSig)
      throw fail("local header of " + e.name + " is missing or out of place");
    const uint64_t start = local + kLocalSize + u16(data + local + 26) + u16(data + local + 28);
    if (!fits(start, e.stored_size, size))
      throw fail("data of " + e.name + " lies outside the file; the file may be truncated");
    e.data = data + start;
    out.push_back(std::move(e));
  }
  return out;
}

const uint8_t* zip_entry_bytes(const ZipEntry& e, const std::string& what, bool verify_crc) {
  if (e.flags & 1u) throw Error(what + ": zip entry " + e.name + " is encrypted");
  if (e.method != 0)
    throw Error(what + ": zip entry " + e.name + " is compressed (method " +
                std::to_string(e.method) +
                "); torch.save writes uncompressed archives, so re-save it with torch.save");
  if (e.stored_size != e.size)
    throw Error(what + ": zip entry " + e.name + " has inconsistent sizes");
  if (verify_crc && crc32(e.data, e.size) != e.crc32)
    throw Error(what + ": zip entry " + e.name + " fails its CRC check; the file is corrupt");
  return e.data;
}

uint32_t crc32(const uint8_t* p, size_t n) {
  return static_cast<uint32_t>(::crc32_z(0, p, n));
}

}  // namespace lingbot
