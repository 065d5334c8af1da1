// The tiny streaming fixtures as the heads see them: per-call aggregator tokens, the frames each
// call covers, and the head configurations derived from meta.json.
#pragma once

#include <array>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "lingbot/tensor.h"
#include "model/camera_head.h"
#include "model/depth_head.h"
#include "test_util.h"
#include "weights/safetensors.h"

namespace lingbot::test {

struct TinyStream {
  nlohmann::json meta;
  SafetensorsFile file;
  int scale_frames = 0;
  int total_frames = 0;
  int H = 0, W = 0;

  explicit TinyStream(const std::string& name) {
    const std::string dir = fixtures_dir() + "/tiny/";
    std::ifstream in(dir + "meta.json");
    meta = nlohmann::json::parse(in);
    file = read_safetensors(dir + name + ".safetensors");
    scale_frames = meta["streaming"]["num_scale_frames"].get<int>();
    total_frames = static_cast<int>(meta["frames"].size());
    H = meta["image_hw"][0].get<int>();
    W = meta["image_hw"][1].get<int>();
  }

  // Call 0 holds the scale frames; call c >= 1 the single frame scale_frames + c - 1.
  int calls() const { return total_frames - scale_frames + 1; }
  int first_frame(int call) const { return call == 0 ? 0 : scale_frames + call - 1; }
  int frames_in(int call) const { return call == 0 ? scale_frames : 1; }

  const Tensor& get(const std::string& key) const { return file.tensors.at(key); }
  const Tensor& tokens(int call, int layer) const {
    return get("tokens.call" + std::to_string(call) + ".layer" + std::to_string(layer));
  }

  int64_t dim_in() const { return 2 * meta["config"]["embed_dim"].get<int64_t>(); }

  CameraHeadConfig camera_config() const {
    const auto& c = meta["config"];
    CameraHeadConfig cfg;
    cfg.dim_in = dim_in();
    cfg.dim = c["camera_dim"].get<int64_t>();
    cfg.heads = c["camera_heads"].get<int64_t>();
    cfg.depth = c["camera_trunk_depth"].get<int64_t>();
    return cfg;
  }

  DepthHeadConfig depth_config() const {
    const auto& c = meta["config"];
    DepthHeadConfig cfg;
    cfg.dim_in = dim_in();
    cfg.features = c["dpt_features"].get<int64_t>();
    for (int l = 0; l < 4; ++l) cfg.out_channels[l] = c["dpt_out_channels"][l].get<int64_t>();
    cfg.patch = c["patch_size"].get<int>();
    return cfg;
  }

  uint64_t seed() const { return meta["seed"].get<uint64_t>(); }
};

}  // namespace lingbot::test
