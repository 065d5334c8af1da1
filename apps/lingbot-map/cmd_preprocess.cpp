#include <cstdio>
#include <filesystem>
#include <map>
#include <memory>
#include <string>

#include "commands.h"
#include "lingbot/error.h"
#include "lingbot/image.h"

namespace lingbot::cli {

namespace {

struct PreprocessArgs {
  std::string input, mode = "crop", out;
  int size = 518;
};

int run_preprocess(const PreprocessArgs& a) {
  namespace fs = std::filesystem;
  constexpr int kPatch = 14;
  if (a.size <= 0 || a.size % kPatch != 0)
    throw Error("--size " + std::to_string(a.size) +
                " is not a positive multiple of the patch size " + std::to_string(kPatch));
  const PreprocessMode mode = a.mode == "pad" ? PreprocessMode::Pad : PreprocessMode::Crop;

  std::error_code ec;
  std::vector<std::string> inputs;
  if (fs::is_directory(a.input, ec))
    inputs = list_images(a.input);
  else if (fs::exists(a.input, ec))
    inputs = {a.input};
  else
    throw Error(a.input + ": no such file or folder");

  // a.jpg and a.png would both become a.png: refuse rather than silently keep one.
  std::map<std::string, std::string> targets;
  for (const std::string& in : inputs) {
    const std::string out = (fs::path(a.out) / fs::path(in).stem()).string() + ".png";
    auto [it, fresh] = targets.emplace(out, in);
    if (!fresh) throw Error(it->second + " and " + in + " would both be written to " + out);
  }
  fs::create_directories(a.out, ec);
  if (!fs::is_directory(a.out)) throw Error(a.out + ": cannot create the output folder");

  for (const auto& [out, in] : targets) {
    Tensor chw;
    try {
      chw = preprocess(load_image(in), mode, a.size, kPatch);
    } catch (const Error& e) {
      // preprocess() knows pixels, not files; name the file here.
      const std::string msg = e.what();
      if (msg.rfind(in, 0) == 0) throw;
      throw Error(in + ": " + msg);
    }
    const int H = int(chw.dim(1)), W = int(chw.dim(2));
    ImageU8 img;
    img.width = W;
    img.height = H;
    img.rgb.resize(size_t(W) * H * 3);
    const uint8_t* p = chw.data<uint8_t>();
    for (int c = 0; c < 3; ++c)
      for (size_t i = 0; i < size_t(W) * H; ++i) img.rgb[i * 3 + c] = p[c * size_t(W) * H + i];
    write_png(out, img);
  }
  std::printf("wrote %zu frame%s to %s\n", targets.size(), targets.size() == 1 ? "" : "s",
              a.out.c_str());
  return 0;
}

}  // namespace

void add_preprocess(CLI::App& app) {
  auto args = std::make_shared<PreprocessArgs>();
  CLI::App* sub = app.add_subcommand(
      "preprocess", "Write the model-input frames (resized, cropped or padded) as PNG files");
  sub->add_option("--input", args->input, "image file or folder of .png/.jpg/.jpeg images")
      ->required();
  // --preprocess as in `run`; --mode, its first name, still works.
  sub->add_option("--preprocess,--mode", args->mode, "crop (default) or pad")
      ->check(CLI::IsMember({"crop", "pad"}));
  sub->add_option("--out", args->out, "output folder (created if missing)")->required();
  sub->add_option("--size", args->size, "target size, a multiple of 14 (default 518)");
  commands().push_back({sub, [args] { return run_preprocess(*args); }});
}

}  // namespace lingbot::cli
