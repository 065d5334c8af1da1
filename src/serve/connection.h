// One client's WebSocket on /v1/stream, on the network thread: reads its messages (start, then
// frames, then finish), checks their order and size, admits the stream and hands its frames to
// the session worker, and writes the worker's messages back one at a time.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "net/http.h"
#include "serve/context.h"
#include "serve/worker.h"

namespace lingbot::serve {

class StreamConnection : public std::enable_shared_from_this<StreamConnection> {
 public:
  StreamConnection(net::tcp::socket&& socket, Context& ctx);
  ~StreamConnection();  // cancels the session, if it is still running

  void start(net::Request req);  // the WebSocket handshake
  void go_away();                // the server stops: close 1001 after the message in flight
  void close();                  // drops the socket at once

 private:
  enum class State { AwaitStart, Streaming, Finishing, Closing };

  void read();
  void on_message();
  void on_text(const std::string& text);
  void on_frame(std::string bytes);
  // Ends the stream with `reason` and close `code`: the protocol was broken (not a crash).
  void fail(int code, const std::string& reason);
  void pump();  // writes the next message unless one is being written
  void gone();  // the socket failed or closed: the session ends
  void wake();  // from any thread
  void on_start_timeout();

  net::websocket::stream<net::beast::tcp_stream> ws_;
  // Until "start" arrives the socket holds no session, but a slot of the server's connections:
  // the websocket's own idle timeout (minutes) is too long for that.
  net::asio::steady_timer start_timer_;
  Context& ctx_;
  net::beast::flat_buffer in_;
  std::shared_ptr<SessionWorker> worker_;
  std::string id_;
  std::optional<Outgoing> final_;  // the last message, from this thread (error, refusal)
  // While reading is paused and nothing is being written no handler holds the connection: it
  // holds itself until the worker's wake-up resumes it.
  std::shared_ptr<StreamConnection> paused_;
  State state_ = State::AwaitStart;
  bool reading_ = false, writing_ = false, closed_ = false, close_queued_ = false;
};

}  // namespace lingbot::serve
