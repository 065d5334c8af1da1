// Read-only memory mapping of a whole file, shared by the views that point into it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace lingbot {

struct MappedFile {
  const uint8_t* data = nullptr;
  size_t size = 0;
  std::shared_ptr<void> owner;  // unmaps when the last view goes
};

MappedFile map_file(const std::string& path);

}  // namespace lingbot
