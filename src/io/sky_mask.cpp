// Sky masks: the model's scores turned into masks as the reference does, their PNG cache, the
// side-by-side pictures, and the confidence they zero (lingbot/sky_mask.h).
#include "lingbot/sky_mask.h"

#include <algorithm>
#include <filesystem>
#include <mutex>

#include "io/sky_segmenter.h"
#include "lingbot/error.h"
#include "lingbot/image.h"

namespace lingbot {
namespace {

namespace fs = std::filesystem;

// The frame as the reference hands it to the model: x * 255 truncated to 8 bits (exact for
// frames made as byte / 255).
ImageU8 frame_to_rgb(const Tensor& frame) {
  LINGBOT_CHECK_ARG(frame.rank() == 3 && frame.dim(0) == 3 && frame.dtype() == DType::F32 &&
                        frame.device() == Device::CPU,
                    "sky masking needs a host F32 [3, H, W] frame");
  ImageU8 img;
  img.height = static_cast<int>(frame.dim(1));
  img.width = static_cast<int>(frame.dim(2));
  const size_t plane = size_t(img.width) * img.height;
  img.rgb.resize(plane * 3);
  const float* p = frame.f32();
  for (size_t i = 0; i < plane; ++i)
    for (int c = 0; c < 3; ++c) {
      const float v = p[c * plane + i] * 255.0f;
      img.rgb[i * 3 + c] = static_cast<uint8_t>(v > 0 ? std::min(v, 255.0f) : 0.0f);
    }
  return img;
}

std::string mask_file_name(const std::string& name) {
  return fs::path(name).filename().replace_extension(".png").string();
}

// A mask as an 8-bit picture: 255 kept, 0 sky (grey, stored as RGB).
ImageU8 mask_picture(const std::vector<uint8_t>& keep, int w, int h) {
  ImageU8 img{w, h, std::vector<uint8_t>(keep.size() * 3)};
  for (size_t i = 0; i < keep.size(); ++i)
    img.rgb[3 * i] = img.rgb[3 * i + 1] = img.rgb[3 * i + 2] = keep[i] ? 255 : 0;
  return img;
}

// Frame | mask | frame with the sky blended 65 % towards (255, 64, 64), as the reference draws.
ImageU8 visualization(const ImageU8& rgb, const std::vector<uint8_t>& keep) {
  const int w = rgb.width, h = rgb.height;
  ImageU8 out{3 * w, h, std::vector<uint8_t>(size_t(3) * w * h * 3)};
  static constexpr float kTint[3] = {255, 64, 64};
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x) {
      const size_t i = size_t(y) * w + x;
      const uint8_t* s = &rgb.rgb[i * 3];
      uint8_t* row = &out.rgb[size_t(y) * 3 * w * 3];
      for (int c = 0; c < 3; ++c) {
        row[x * 3 + c] = s[c];
        row[(w + x) * 3 + c] = keep[i] ? 255 : 0;
        const float tinted = s[c] * 0.35f + kTint[c] * 0.65f;
        row[(2 * w + x) * 3 + c] = keep[i] ? s[c] : static_cast<uint8_t>(std::min(tinted, 255.f));
      }
    }
  return out;
}

void make_folder(const std::string& dir, const char* what) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec || !fs::is_directory(dir))
    throw Error(std::string("cannot create the ") + what + " folder " + dir + ": " +
                (ec ? ec.message() : std::string("a file of that name is in the way")));
}

}  // namespace

bool sky_segmentation_available() {
  return sky::segmenter_available();
}

struct SkyMasker::Impl {
  SkyMaskOptions o;
  std::unique_ptr<sky::Segmenter> model;
  std::mutex mutex;  // the model and the counts, for callers on several threads
  Counts counts;
};

SkyMasker::SkyMasker(const SkyMaskOptions& options) : impl_(std::make_unique<Impl>()) {
  impl_->o = options;
  LINGBOT_CHECK_ARG(!options.model.empty() || !options.dir.empty(),
                    "sky masking needs a segmentation model or a folder of masks");
  if (!options.model.empty()) impl_->model = sky::load_segmenter(options.model);
  if (!options.dir.empty()) make_folder(options.dir, "sky mask");
  if (!options.visualization_dir.empty())
    make_folder(options.visualization_dir, "sky mask visualization");
}

SkyMasker::~SkyMasker() = default;

std::vector<uint8_t> SkyMasker::non_sky(const Tensor& frame, const std::string& name) {
  const ImageU8 rgb = frame_to_rgb(frame);
  const size_t pixels = size_t(rgb.width) * rgb.height;
  const SkyMaskOptions& o = impl_->o;
  const std::string file = mask_file_name(name);
  const std::string stored = o.dir.empty() ? "" : (fs::path(o.dir) / file).string();
  std::vector<uint8_t> keep;
  std::string unusable;  // why the stored mask was not used
  if (!stored.empty()) {
    std::error_code ec;
    if (!fs::exists(stored, ec)) {
      unusable = stored + " does not exist";
    } else {
      try {
        const ImageU8 m = load_image(stored);
        if (m.width == rgb.width && m.height == rgb.height) {
          keep.resize(pixels);
          for (size_t i = 0; i < pixels; ++i) keep[i] = m.rgb[3 * i] != 0;
        } else {
          unusable = stored + " is " + std::to_string(m.width) + "x" + std::to_string(m.height) +
                     ", the frame " + std::to_string(rgb.width) + "x" + std::to_string(rgb.height);
        }
      } catch (const Error& e) {
        unusable = e.what();
      }
    }
  }
  std::lock_guard lock(impl_->mutex);
  if (!keep.empty()) {
    ++impl_->counts.reused;
  } else {
    if (!impl_->model)
      throw Error("no sky mask for frame " + name + " (" + unusable +
                  ") and no sky segmentation model to compute it");
    const std::vector<uint8_t> scores = impl_->model->scores(rgb);
    keep.resize(pixels);
    // The reference's rule: its non-sky map is 1 - min(score, 1), kept above 0.1, which on 8-bit
    // scores keeps only the pixels that scored 0.
    for (size_t i = 0; i < pixels; ++i) keep[i] = scores[i] == 0;
    if (!stored.empty()) write_png(stored, mask_picture(keep, rgb.width, rgb.height));
    ++impl_->counts.computed;
  }
  if (!o.visualization_dir.empty())
    write_png((fs::path(o.visualization_dir) / file).string(), visualization(rgb, keep));
  return keep;
}

void SkyMasker::apply(FrameResult& r, const Tensor& frame, const std::string& name) {
  LINGBOT_CHECK_ARG(frame.rank() == 3 && frame.dim(1) == r.height && frame.dim(2) == r.width &&
                        r.confidence.size() == size_t(r.height) * r.width,
                    "sky masking: the frame's size does not match its result's");
  const std::vector<uint8_t> keep = non_sky(frame, name);
  for (size_t i = 0; i < keep.size(); ++i) r.confidence[i] *= static_cast<float>(keep[i]);
}

SkyMasker::Counts SkyMasker::counts() const {
  std::lock_guard lock(impl_->mutex);
  return impl_->counts;
}

}  // namespace lingbot
