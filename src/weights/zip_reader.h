// The directory of a zip archive held in memory. torch.save writes its checkpoints as zip
// archives of uncompressed records, so reading means finding each record's bytes in place.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace lingbot {

struct ZipEntry {
  std::string name;
  const uint8_t* data = nullptr;  // the record's stored bytes, inside the archive buffer
  uint64_t stored_size = 0;       // bytes at `data` (compressed size)
  uint64_t size = 0;              // bytes once extracted
  uint16_t method = 0;            // 0 = stored
  uint16_t flags = 0;             // bit 0 = encrypted
  uint32_t crc32 = 0;
};

// Lists the archive's entries (zip64 included). Every offset and length is checked against the
// buffer, so a damaged archive gives an Error naming `what`, never a read outside `data`.
std::vector<ZipEntry> read_zip_directory(const uint8_t* data, size_t size, const std::string& what);

// The entry's bytes, refusing compressed or encrypted entries; `verify_crc` also checks the
// CRC-32 the archive records for it.
const uint8_t* zip_entry_bytes(const ZipEntry& e, const std::string& what, bool verify_crc);

uint32_t crc32(const uint8_t* p, size_t n);

}  // namespace lingbot
