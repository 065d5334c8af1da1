#include "viewer/assets.h"

namespace lingbot::viewer {

// Generated at build time from web/viewer (cmake/embed_assets.cmake).
extern const Asset kAssets[];
extern const size_t kAssetCount;

const Asset* find_asset(std::string_view path) {
  for (size_t i = 0; i < kAssetCount; ++i)
    if (kAssets[i].path == path) return &kAssets[i];
  return nullptr;
}

}  // namespace lingbot::viewer
