// One stream's session and the thread that pushes its frames. The network thread hands it
// frames (at most `queue` waiting: beyond that it stops reading the socket) and takes its
// messages (at most `max_out` waiting: beyond that this thread waits, and so the session
// pauses); so a stream holds a bounded amount of memory whatever its client does. The engine
// batches the model steps of the sessions pushed from their threads at the same time.
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "lingbot/engine.h"
#include "lingbot/exports.h"
#include "serve/admission.h"
#include "serve/metrics.h"
#include "serve/protocol.h"

namespace lingbot::serve {

// A message for the client, in order.
struct Outgoing {
  std::string data{};
  bool binary = false;
  int close_code = 0;            // close the WebSocket with this code after it (0: stay open)
  bool result = false;           // a result's text: counted in the metrics once sent
  Clock::time_point received{};  // result: when its frame arrived
  std::string reason{};          // an error that ends the stream: for the server's log
};

struct WorkerSetup {
  Engine* engine = nullptr;
  Start start;
  std::string id;
  int queue = 4;
  size_t max_out = 10;
  std::unique_ptr<Reservation> reservation;  // given back when the session is gone
  Metrics* metrics = nullptr;
  std::function<void()> wake;  // from the worker: there are messages, or room for frames
  // A live view (serve --view): every result with its frame, then finish() when the stream
  // ends, however it ends. Null: none.
  std::shared_ptr<ResultSink> view;
};

class SessionWorker {
 public:
  explicit SessionWorker(WorkerSetup setup);  // starts the thread
  ~SessionWorker() { stop(); }
  void stop();  // cancels and joins; after it, `wake` is not called again
  SessionWorker(const SessionWorker&) = delete;
  SessionWorker& operator=(const SessionWorker&) = delete;

  // The network thread's side.
  void push(std::string frame, Clock::time_point received);
  bool wants_frames() const;  // fewer than `queue` frames waiting, and no finish yet
  // Nothing to do but wait for the client's next frame: none queued or being computed, every
  // message taken, no finish yet (the stream idle timeout counts only then).
  bool waiting_for_frames() const;
  void finish();             // the client's finish: the frames waiting, then the session's end
  void cancel(Outcome why);  // the client left or broke the protocol: drop everything
  std::optional<Outgoing> pop();
  bool done() const { return done_; }  // the session is destroyed, its reservation given back

 private:
  struct Frame {
    std::string bytes;
    Clock::time_point received;
  };
  void run();
  Tensor decode(const std::string& bytes, int64_t index) const;
  void deliver(const FrameResult& r);
  void emit(Outgoing m);  // waits for room
  void end();

  WorkerSetup s_;
  std::unique_ptr<Session> session_;        // this thread's
  std::deque<Clock::time_point> arrivals_;  // of the frames pushed whose results are due
  std::deque<Tensor> images_;               // the same frames, for the view
  int64_t frames_ = 0, results_ = 0;
  Outcome outcome_ = Outcome::Finished;

  mutable std::mutex mu_;
  std::condition_variable cv_;  // the worker waits on it, for frames or room
  std::deque<Frame> in_;
  std::deque<Outgoing> out_;
  bool finishing_ = false, cancelled_ = false;
  bool working_ = false;  // a frame taken from in_ is being decoded or computed
  std::atomic<bool> done_{false};
  std::thread thread_;
};

}  // namespace lingbot::serve
