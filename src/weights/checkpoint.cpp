#include "weights/checkpoint.h"

#include <cstring>

#include "lingbot/error.h"
#include "weights/mapped_file.h"
#include "weights/safetensors.h"
#include "weights/torch_pt.h"

namespace lingbot {

TensorMap load_checkpoint(const std::string& path) {
  MappedFile f = map_file(path);
  const uint8_t* p = f.data;
  // safetensors opens with a little-endian header length and then the JSON header's '{'.
  if (f.size >= 9 && p[8] == '{') return parse_safetensors(p, f.size, f.owner, path).tensors;
  const bool zip = f.size >= 4 && std::memcmp(p, "PK", 2) == 0;
  const bool pickle = f.size >= 2 && p[0] == 0x80;
  const bool tar = f.size >= 262 && std::memcmp(p + 257, "ustar", 5) == 0;
  if (zip || pickle || tar) return parse_torch_checkpoint(p, f.size, f.owner, path);
  throw Error(path +
              ": unrecognized checkpoint format (expected .safetensors or a torch.save file)");
}

}  // namespace lingbot
