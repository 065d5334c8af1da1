// Depth and confidence maps at full float32 precision as NumPy .npy files, for users who need
// more than the 16-bit PNGs' fixed resolution and range (np.load reads them as they are).
#include <bit>
#include <filesystem>
#include <string_view>
#include <utility>

#include "io/sinks/sink.h"
#include "io/sinks/sink_util.h"

namespace lingbot {
namespace {

static_assert(std::endian::native == std::endian::little,
              "the maps are written '<f4' straight from memory");

// Format version 1.0: magic, version, little-endian header length, then a Python dict literal
// padded with spaces and ended by a newline so that the data starts on a 64-byte boundary.
std::string npy_header(int height, int width) {
  std::string dict = "{'descr': '<f4', 'fortran_order': False, 'shape': (" +
                     std::to_string(height) + ", " + std::to_string(width) + "), }";
  const size_t unpadded = 10 + dict.size() + 1;
  dict.append((64 - unpadded % 64) % 64, ' ');
  dict += '\n';
  const auto n = static_cast<uint16_t>(dict.size());
  std::string out("\x93NUMPY\x01\x00", 8);
  out += static_cast<char>(n & 0xff);
  out += static_cast<char>(n >> 8);
  return out + dict;
}

class DepthNpySink : public ResultSink {
 public:
  std::string name() const override { return "depth_f32"; }
  DepthNpySink(const std::string& dir, FrameNamer name) : dir_(dir), name_(std::move(name)) {
    sinks::make_folder(dir_ + "/depth_f32");
    sinks::make_folder(dir_ + "/confidence_f32");
  }

  void add(const FrameResult& r, const Tensor*) override {
    sinks::check_result(r);
    const std::string file =
        std::filesystem::path(name_(r.index)).replace_extension(".npy").string();
    const std::string header = npy_header(r.height, r.width);
    // Whole files only: a reader never meets a map cut short by an interrupted run.
    for (const auto& [folder, values] :
         {std::pair{"/depth_f32/", &r.depth}, std::pair{"/confidence_f32/", &r.confidence}})
      sinks::replace_file(dir_ + folder + file, [&](sinks::OutFile& f) {
        f.write(header);
        f.write({reinterpret_cast<const char*>(values->data()), values->size() * sizeof(float)});
      });
  }

  void finish() override {}

 private:
  std::string dir_;
  FrameNamer name_;
};

}  // namespace

std::unique_ptr<ResultSink> make_depth_npy_sink(const std::string& dir, FrameNamer name) {
  return std::make_unique<DepthNpySink>(dir, name ? std::move(name) : default_frame_name);
}

}  // namespace lingbot
