#include "serve/worker.h"

#include <cstdio>

#if defined(__GLIBC__)
#include <malloc.h>
#endif

#include "lingbot/error.h"
#include "lingbot/image.h"

namespace lingbot::serve {

SessionWorker::SessionWorker(WorkerSetup setup) : s_(std::move(setup)) {
  thread_ = std::thread([this] { run(); });
}

void SessionWorker::stop() {
  cancel(Outcome::Disconnected);
  if (thread_.joinable()) thread_.join();
}

void SessionWorker::push(std::string frame, Clock::time_point received) {
  {
    std::lock_guard lock(mu_);
    in_.push_back({std::move(frame), received});
  }
  cv_.notify_all();
}

bool SessionWorker::wants_frames() const {
  std::lock_guard lock(mu_);
  return static_cast<int>(in_.size()) < s_.queue && !finishing_ && !cancelled_;
}

bool SessionWorker::waiting_for_frames() const {
  std::lock_guard lock(mu_);
  return in_.empty() && out_.empty() && !working_ && !finishing_ && !cancelled_;
}

void SessionWorker::finish() {
  {
    std::lock_guard lock(mu_);
    finishing_ = true;
  }
  cv_.notify_all();
}

void SessionWorker::cancel(Outcome why) {
  {
    std::lock_guard lock(mu_);
    if (cancelled_ || done_) return;
    cancelled_ = true;
    outcome_ = why;
    in_.clear();
    out_.clear();
  }
  cv_.notify_all();
}

std::optional<Outgoing> SessionWorker::pop() {
  std::optional<Outgoing> m;
  {
    std::lock_guard lock(mu_);
    if (out_.empty()) return m;
    m = std::move(out_.front());
    out_.pop_front();
  }
  cv_.notify_all();
  return m;
}

void SessionWorker::emit(Outgoing m) {
  {
    std::unique_lock lock(mu_);
    cv_.wait(lock, [&] { return cancelled_ || out_.size() < s_.max_out; });
    if (cancelled_) return;
    out_.push_back(std::move(m));
  }
  s_.wake();
}

void SessionWorker::deliver(const FrameResult& r) {
  Outgoing m{.data = result_json(r), .result = true, .received = Clock::now()};
  if (!arrivals_.empty()) {
    m.received = arrivals_.front();
    arrivals_.pop_front();
  }
  if (s_.view && !images_.empty()) {
    s_.view->add(r, &images_.front());
    images_.pop_front();
  }
  ++results_;
  emit(std::move(m));
  if (s_.start.maps) emit({.data = maps_bytes(r), .binary = true});
}

Tensor SessionWorker::decode(const std::string& bytes, int64_t index) const {
  const auto* data = reinterpret_cast<const uint8_t*>(bytes.data());
  const FrameHeader h = parse_frame_header(data, bytes.size());
  const std::string what = "frame " + std::to_string(index);
  const Start& st = s_.start;
  ImageU8 img;
  if (h.format == FrameHeader::Format::Raw) {
    img.width = h.width;
    img.height = h.height;
    img.rgb.assign(data + kRawHeaderBytes, data + bytes.size());
  } else {
    // No larger picture is decoded than the start message announced.
    img = decode_image(data, bytes.size(), what, size_t(st.width) * size_t(st.height));
  }
  if (img.width != st.width || img.height != st.height)
    throw Error(what + " is " + std::to_string(img.width) + "x" + std::to_string(img.height) +
                    ", the start message said " + std::to_string(st.width) + "x" +
                    std::to_string(st.height),
                ErrorKind::InvalidArgument);
  return model_input(img, st.preprocess, st.target);
}

void SessionWorker::run() {
  const auto deliver = [this](const FrameResult& r) { this->deliver(r); };
  std::optional<Outgoing> last;  // what ends the stream for the client: finished, or an error
  try {
    session_ = s_.engine->start(s_.start.stream);
    for (;;) {
      Frame f;
      {
        std::unique_lock lock(mu_);
        cv_.wait(lock, [&] { return cancelled_ || finishing_ || !in_.empty(); });
        if (cancelled_) break;
        if (in_.empty()) {  // finishing, and every frame pushed
          lock.unlock();
          session_->finish(deliver);
          last = Outgoing{.data = finished_json(results_), .close_code = 1000};
          break;
        }
        f = std::move(in_.front());
        in_.pop_front();
        working_ = true;
      }
      s_.wake();  // room for the next frame
      const Tensor t = decode(f.bytes, frames_);
      arrivals_.push_back(f.received);
      if (s_.view) images_.push_back(t);
      ++frames_;
      session_->push(t, deliver);
      // With no next frame waiting (a live source slower than the device), this frame's result
      // goes out as soon as it is computed instead of with the next frame's push.
      bool idle;
      {
        std::lock_guard lock(mu_);
        idle = in_.empty() && !finishing_ && !cancelled_;
      }
      if (idle) session_->flush(deliver);
      std::lock_guard lock(mu_);
      working_ = false;
    }
  } catch (const std::exception& e) {
    // Bad input (an undecodable frame, one of another size) or a failure of the model, an
    // allocation included: the stream ends with its reason; the server goes on.
    std::lock_guard lock(mu_);
    if (!cancelled_) outcome_ = Outcome::Error;
    last = Outgoing{.data = error_json(e.what()), .close_code = 1008, .reason = e.what()};
  }
  // The session and its reservation are gone before the client hears that the stream ended.
  session_.reset();
  end();
  if (last) emit(std::move(*last));
#if defined(__GLIBC__)
  // The allocator keeps the pages the session freed for later allocations in its arenas; hand
  // them back, so that the server's resident memory falls when its clients leave (0.3-20 ms,
  // after the client has its last message).
  malloc_trim(0);
#endif
  done_ = true;
  s_.wake();
}

// Frees the session's memory and reservation, then counts its end.
void SessionWorker::end() {
  if (s_.view) s_.view->finish();
  images_.clear();
  s_.reservation.reset();
  Outcome o;
  {
    std::lock_guard lock(mu_);
    o = outcome_;
  }
  s_.metrics->ended(s_.id, o);
}

}  // namespace lingbot::serve
