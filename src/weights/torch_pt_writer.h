// Writes tensors as a torch.save checkpoint that torch.load(weights_only=True) reads: a zip
// archive of stored records (archive/data.pkl, archive/data/N, archive/byteorder,
// archive/version), tensor data 64-byte aligned, zip64 records once the archive passes 4 GB.
#pragma once

#include <string>

#include "weights/tensor_map.h"

namespace lingbot {

// Host tensors of any dtype, saved as an OrderedDict in name order; the file is complete or
// absent afterwards. `force_zip64` writes the zip64 form even for a small archive (for tests).
void write_torch_checkpoint(const std::string& path, const TensorMap& tensors,
                            bool force_zip64 = false);

}  // namespace lingbot
