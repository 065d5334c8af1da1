// A streaming session to a snapshot file and back: what the file holds is in
// stream/snapshot_file.h; here the session's state goes in and comes out, and a snapshot is
// checked against the model that resumes it.
#include <cstring>

#include "lingbot/error.h"
#include "stream/session.h"
#include "stream/snapshot_file.h"

namespace lingbot {
namespace {

SnapshotModel identity(const Model& model, const std::shared_future<std::string>& weights) {
  const ModelConfig& c = model.config();
  SnapshotModel m;
  m.arch = c.arch;
  m.dim = c.dim;
  m.depth = c.depth;
  m.heads = c.heads;
  m.compute = dtype_name(c.compute);
  m.kv_cache = dtype_name(c.kv_fp8 ? DType::F8E4M3 : c.compute);
  m.weights = weights.valid() ? weights.get() : std::string();
  return m;
}

std::string describe(const SnapshotModel& m) {
  return m.arch + " (" + m.compute + ", KV cache " + m.kv_cache + ", weights " + m.weights + ")";
}

// Byte copies into backend memory, adjacent ones merged (the camera head's rows arrive one by
// one but mostly lie back to back); the last one waits for flush().
class Writes {
 public:
  explicit Writes(Backend& b) : backend_(b) {}
  void add(const char* host, void* dst, size_t bytes) {
    if (host_ && host_ + bytes_ == host && static_cast<char*>(dst_) + bytes_ == dst) {
      bytes_ += bytes;
      return;
    }
    flush();
    host_ = host;
    dst_ = dst;
    bytes_ = bytes;
  }
  void flush() {
    if (bytes_) backend_.write_bytes(host_, dst_, bytes_);
    host_ = nullptr;
    bytes_ = 0;
  }

 private:
  Backend& backend_;
  const char* host_ = nullptr;
  void* dst_ = nullptr;
  size_t bytes_ = 0;
};

}  // namespace

void StreamSession::save(const std::string& path) {
  Backend& backend = model_.backend();
  backend.use_on_this_thread();
  LINGBOT_CHECK(weights_.valid(), "this session has no model identity to save with");
  collect_in_flight();  // at a frame boundary: the step on the device finishes first
  LINGBOT_CHECK(!seq_ || !seq_->step_open(), "a session is saved between its steps only");

  SnapshotState st;
  st.model = identity(model_, weights_);
  st.options = opt_;
  st.next_index = next_index_;
  st.pending = static_cast<int64_t>(pending_.size());
  st.trajectory = static_cast<int64_t>(cameras_.size());
  const AdaptiveKeyframes::State key = keyframes_.state();
  st.keyframe_last = key.last;

  std::vector<SnapshotTensor> tensors;
  if (seq_) {
    st.height = seq_->config().height;
    st.width = seq_->config().width;
  }
  if (seq_ && seq_->scale_frames() > 0) {
    const PagedKVCache& kv = seq_->kv();
    const KVCacheConfig& kc = kv.config();
    const PagedKVCache::Layout l = kv.layout();
    st.started = true;
    st.scale_frames = seq_->scale_frames();
    st.pages = {l.scale, l.live, l.free};
    st.stored_frames = l.stored_frames;
    st.calibrated = l.calibrated;
    st.stream_head = l.stream_head;
    st.stream_rows = kv.stream_rows();
    const int64_t resident = static_cast<int64_t>(l.scale.size() + l.live.size());
    SnapshotTensor k{
        "kv.k", kc.dtype, {kc.layers, resident, kc.tokens_per_frame, kc.heads, kc.head_dim}};
    SnapshotTensor v = k;
    v.name = "kv.v";
    SnapshotTensor sk{"kv.stream.k", kc.dtype, {kc.layers, st.stream_rows, kc.heads, kc.head_dim}};
    SnapshotTensor sv = sk;
    sv.name = "kv.stream.v";
    SnapshotTensor scales{"kv.scales", DType::F32, {kc.layers, 2, kc.heads}};
    std::vector<KVSegment> segs;
    for (int64_t layer = 0; layer < kc.layers; ++layer) {
      for (const auto* pages : {&l.scale, &l.live})
        for (int32_t p : *pages) {
          k.pieces.push_back({kv.page_k(layer, p), kv.page_size()});
          v.pieces.push_back({kv.page_v(layer, p), kv.page_size()});
        }
      segs.clear();
      kv.stream(layer).segments(segs);
      const size_t row = kv.stream(layer).row_bytes();
      for (const KVSegment& s : segs) {
        sk.pieces.push_back({s.k, s.tokens * row});
        sv.pieces.push_back({s.v, s.tokens * row});
      }
      if (const Tensor* t = kv.fp8_scales(layer)) scales.pieces.push_back({t->raw(), t->nbytes()});
    }
    tensors.push_back(std::move(k));
    tensors.push_back(std::move(v));
    tensors.push_back(std::move(sk));
    tensors.push_back(std::move(sv));
    if (kc.dtype == DType::F8E4M3) tensors.push_back(std::move(scales));

    const CameraCache& cam = seq_->camera();
    const CameraCache::Layout cl = cam.layout();
    st.camera_rows = cl.rows;
    st.camera_pinned = cl.pinned;
    st.camera_head = cl.rest_head;
    const int64_t slots = static_cast<int64_t>(cam.iterations()) * cam.depth();
    SnapshotTensor ck{"camera.k", cam.dtype(), {slots, cl.rows, cam.heads(), cam.head_dim()}};
    SnapshotTensor cv = ck;
    cv.name = "camera.v";
    for (int i = 0; i < cam.iterations(); ++i)
      for (int b = 0; b < cam.depth(); ++b) {
        segs.clear();
        cam.segments(i, b, segs);
        for (const KVSegment& s : segs) {
          ck.pieces.push_back({s.k, s.tokens * cam.row_bytes()});
          cv.pieces.push_back({s.v, s.tokens * cam.row_bytes()});
        }
      }
    tensors.push_back(std::move(ck));
    tensors.push_back(std::move(cv));
  }

  // Host data: the keyframe rule's reference, the buffered scale-block frames, the cameras.
  const auto host = [&](const char* name, DType dtype, Shape shape, const void* data) {
    SnapshotTensor t{name, dtype, shape};
    t.pieces.push_back({data, static_cast<size_t>(shape_numel(shape)) * dtype_size(dtype)});
    t.device = false;
    tensors.push_back(std::move(t));
  };
  host("keyframe.c2w", DType::F32, {12}, key.c2w.data());
  host("keyframe.K", DType::F32, {9}, key.K.data());
  SnapshotTensor pending{"pending", DType::F32, {st.pending, 3, st.height, st.width}};
  pending.device = false;
  for (const Tensor& f : pending_) pending.pieces.push_back({f.raw(), f.nbytes()});
  tensors.push_back(std::move(pending));
  std::vector<float> pose(cameras_.size() * 9);
  std::vector<int64_t> index(cameras_.size());
  std::vector<uint8_t> flags(cameras_.size());
  for (size_t i = 0; i < cameras_.size(); ++i) {
    std::memcpy(pose.data() + 9 * i, cameras_[i].pose_enc.data(), 9 * sizeof(float));
    index[i] = cameras_[i].index;
    flags[i] = cameras_[i].flags;
  }
  host("trajectory.pose_enc", DType::F32, {st.trajectory, 9}, pose.data());
  host("trajectory.index", DType::I64, {st.trajectory}, index.data());
  host("trajectory.flags", DType::U8, {st.trajectory}, flags.data());

  write_snapshot(path, st, tensors, [&](const void* src, void* dst, size_t bytes) {
    backend.read_bytes(src, dst, bytes);
  });
}

std::unique_ptr<StreamSession> StreamSession::resume(Model& model, StepScheduler& scheduler,
                                                     std::shared_future<std::string> weights,
                                                     const SessionSnapshot& snap,
                                                     const ResumeOptions& options,
                                                     const std::string& what) {
  const SnapshotState& st = snap.state;
  const SnapshotModel mine = identity(model, weights);
  const SnapshotModel& saved = st.model;
  if (saved.arch != mine.arch || saved.dim != mine.dim || saved.depth != mine.depth ||
      saved.heads != mine.heads || saved.compute != mine.compute ||
      saved.kv_cache != mine.kv_cache || saved.weights != mine.weights)
    throw Error(what + ": this session was saved by " + describe(saved) + "; this engine runs " +
                describe(mine) +
                ". Resume it with the model, --arch and --precision that saved it.");
  const ModelConfig& mc = model.config();
  if (st.height > 0)
    LINGBOT_CHECK(st.height % mc.patch == 0 && st.width % mc.patch == 0,
                  what + ": its frame size " + std::to_string(st.width) + "x" +
                      std::to_string(st.height) + " is not a multiple of the model's patch");

  StreamOptions opt = st.options;
  if (options.descriptors) opt.descriptors = *options.descriptors;
  auto s = std::make_unique<StreamSession>(model, scheduler, opt, weights);
  Backend& backend = model.backend();
  backend.use_on_this_thread();
  s->next_index_ = st.next_index;
  if (st.height > 0)
    s->seq_ = std::make_unique<SequenceState>(model, sequence_config(mc, st.height, st.width, opt));

  const Tensor& pending = snap.tensors.at("pending");
  for (int64_t f = 0; f < st.pending; ++f) {
    Tensor t = Tensor::zeros({3, st.height, st.width});
    std::memcpy(t.raw(), pending[f].raw(), t.nbytes());
    s->pending_.push_back(std::move(t));
  }

  if (st.started) {
    PagedKVCache& kv = s->seq_->kv();
    const KVCacheConfig& kc = kv.config();
    const Tensor& k = snap.tensors.at("kv.k");
    const Tensor& v = snap.tensors.at("kv.v");
    LINGBOT_CHECK(k.dim(2) == kc.tokens_per_frame,
                  what + ": its KV pages hold " + std::to_string(k.dim(2)) +
                      " tokens a frame; frames of its size hold " +
                      std::to_string(kc.tokens_per_frame) + " in this model");
    PagedKVCache::Layout l;
    l.scale = st.pages.scale;
    l.live = st.pages.live;
    l.free = st.pages.free;
    l.stored_frames = st.stored_frames;
    l.calibrated = st.calibrated;
    l.stream_head = st.stream_head;
    const int64_t per_frame = kc.camera_only ? 1 : kc.special_tokens;
    LINGBOT_CHECK(st.stream_rows % per_frame == 0 && st.stream_head < kv.stream(0).chunk_rows(),
                  what + ": its special-token stream does not hold whole frames");
    try {
      kv.restore(l);
    } catch (const Error& e) {
      throw Error(what + ": " + e.what());
    }
    const Tensor& sk = snap.tensors.at("kv.stream.k");
    const Tensor& sv = snap.tensors.at("kv.stream.v");
    Writes writes(backend);
    std::vector<KVStream::RowSpan> spans;
    for (int64_t layer = 0; layer < kc.layers; ++layer) {
      int64_t i = 0;
      for (const auto* pages : {&l.scale, &l.live})
        for (int32_t p : *pages) {
          writes.add(static_cast<const char*>(k[layer][i].raw()), kv.page_k(layer, p),
                     kv.page_size());
          writes.add(static_cast<const char*>(v[layer][i].raw()), kv.page_v(layer, p),
                     kv.page_size());
          ++i;
        }
      spans.clear();
      kv.stream(layer).grow(st.stream_rows, spans);
      const size_t row = kv.stream(layer).row_bytes();
      int64_t r = 0;
      for (const KVStream::RowSpan& span : spans) {
        writes.add(static_cast<const char*>(sk[layer].raw()) + r * row, span.k, span.rows * row);
        writes.add(static_cast<const char*>(sv[layer].raw()) + r * row, span.v, span.rows * row);
        r += span.rows;
      }
      if (const Tensor* t = kv.fp8_scales(layer))
        writes.add(static_cast<const char*>(snap.tensors.at("kv.scales")[layer].raw()), t->raw(),
                   t->nbytes());
    }

    CameraCache& cam = s->seq_->camera();
    const Tensor& ck = snap.tensors.at("camera.k");
    const Tensor& cv = snap.tensors.at("camera.v");
    const int64_t slots = static_cast<int64_t>(cam.iterations()) * cam.depth();
    LINGBOT_CHECK(ck.dim(0) == slots && ck.dim(2) == cam.heads() && ck.dim(3) == cam.head_dim(),
                  what + ": its camera-head cache is " + shape_str(ck.shape()) +
                      "; this model's holds " + std::to_string(slots) + " slots of " +
                      std::to_string(cam.heads()) + " x " + std::to_string(cam.head_dim()));
    LINGBOT_CHECK(st.camera_head < cam.chunk_frames(),
                  what + ": its camera-head cache starts outside a chunk");
    try {
      cam.restore({st.camera_rows, st.camera_pinned, st.camera_head});
    } catch (const Error& e) {
      throw Error(what + ": " + e.what());
    }
    std::vector<KVDestination::Frame> rows;
    const size_t row = cam.row_bytes();
    for (int i = 0; i < cam.iterations(); ++i)
      for (int b = 0; b < cam.depth(); ++b) {
        rows.clear();
        cam.reserve(i, b, st.camera_rows, rows);
        const int64_t slot = static_cast<int64_t>(i) * cam.depth() + b;
        for (int64_t r = 0; r < st.camera_rows; ++r) {
          writes.add(static_cast<const char*>(ck[slot].raw()) + r * row,
                     static_cast<char*>(rows[r].k), row);
          writes.add(static_cast<const char*>(cv[slot].raw()) + r * row,
                     static_cast<char*>(rows[r].v), row);
        }
      }
    writes.flush();
    s->seq_->restored(st.scale_frames);
  }

  AdaptiveKeyframes::State key;
  key.last = st.keyframe_last;
  std::memcpy(key.c2w.data(), snap.tensors.at("keyframe.c2w").raw(), sizeof(key.c2w));
  std::memcpy(key.K.data(), snap.tensors.at("keyframe.K").raw(), sizeof(key.K));
  s->keyframes_.restore(key);

  const float* pose = snap.tensors.at("trajectory.pose_enc").f32();
  const int64_t* index = snap.tensors.at("trajectory.index").data<int64_t>();
  const uint8_t* flags = snap.tensors.at("trajectory.flags").data<uint8_t>();
  s->cameras_.resize(static_cast<size_t>(st.trajectory));
  for (int64_t i = 0; i < st.trajectory; ++i) {
    Camera& c = s->cameras_[i];
    c.index = index[i];
    std::memcpy(c.pose_enc.data(), pose + 9 * i, 9 * sizeof(float));
    c.flags = flags[i] & (kCameraKeyframe | kCameraScaleFrame);
  }
  return s;
}

}  // namespace lingbot
