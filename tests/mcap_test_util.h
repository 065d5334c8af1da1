// A minimal MCAP record walker for the tests, written from the specification and sharing no
// code with the writer (src/io/mcap/writer.cpp): the file's magic, every record as (opcode,
// offset, content) and the closing magic, with nothing decoded beyond the framing.
#pragma once

#include <cstdint>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

namespace lingbot::test {

inline const std::string kMcapMagic("\x89MCAP0\r\n", 8);

// Little-endian field at `at`; 0 past the end (a test then fails on the value).
template <class T>
T le(const std::string& s, size_t at) {
  if (at + sizeof(T) > s.size()) return T{};
  T v{};
  for (size_t b = 0; b < sizeof(T); ++b)
    v |= static_cast<T>(static_cast<T>(static_cast<uint8_t>(s[at + b])) << (8 * b));
  return v;
}

// A String field (uint32 length, bytes) at `at`; moves `at` past it.
inline std::string mcap_string(const std::string& s, size_t& at) {
  const uint32_t n = le<uint32_t>(s, at);
  at += 4;
  std::string out = at + n <= s.size() ? s.substr(at, n) : std::string();
  at += n;
  return out;
}

struct McapRecord {
  uint8_t op = 0;
  uint64_t offset = 0;  // of the opcode in the file (or chunk)
  std::string content;
};

struct McapRecords {
  bool ok = false;  // leading magic, whole records, closing magic right after the footer
  std::string error;
  std::vector<McapRecord> records;
};

// Records of `bytes` from `start` to the end (a file: start 8, after the magic; a chunk's
// records: start 0, no magic at either end).
inline McapRecords walk_mcap_records(const std::string& bytes, size_t start, bool file) {
  McapRecords out;
  if (file && bytes.compare(0, 8, kMcapMagic) != 0) {
    out.error = "no leading magic";
    return out;
  }
  size_t at = start;
  while (at < bytes.size()) {
    if (file && bytes.size() - at == 8 && !out.records.empty() && out.records.back().op == 0x02) {
      out.ok = bytes.compare(at, 8, kMcapMagic) == 0;
      if (!out.ok) out.error = "bad closing magic";
      return out;
    }
    if (bytes.size() - at < 9) break;
    const uint64_t n = le<uint64_t>(bytes, at + 1);
    if (n > bytes.size() - at - 9) break;
    out.records.push_back({static_cast<uint8_t>(bytes[at]), at, bytes.substr(at + 9, n)});
    at += 9 + n;
  }
  out.ok = !file && at == bytes.size();
  if (!out.ok)
    out.error = "records end at " + std::to_string(at) + " of " + std::to_string(bytes.size());
  return out;
}

inline std::string read_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}

}  // namespace lingbot::test
