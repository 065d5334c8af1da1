// The browsers watching one Scene: each a WebSocket (WsSession) on the server's network thread,
// and the Hub that wakes their writers when the Scene changes. Used by the viewer's own server
// and by the stream server's live views (`serve --view`), one Hub per Scene.
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <memory>
#include <vector>

#include "net/http.h"
#include "viewer/scene.h"

namespace lingbot::viewer {

class WsSession;

// The browsers of one Scene; on the network thread only, except wake() and the counts.
class Hub {
 public:
  explicit Hub(net::asio::any_io_executor ex) : ex_(std::move(ex)) {}
  // A browser's place among at most `max` (null: all taken). Taken here, before the handshake,
  // so that a burst of upgrades cannot overshoot, and given back when the last copy goes: with
  // the browser's connection, however it ends (a handshake that fails included).
  using Slot = std::shared_ptr<void>;
  Slot take_slot(int64_t max);
  // Takes the upgrade request's socket for a new browser of `scene`, in its `slot`. `owner`
  // keeps the scene and this hub alive while the browser is connected (null where they
  // outlive the server).
  void accept(net::tcp::socket&& socket, net::Request req, Scene& scene, Slot slot,
              std::shared_ptr<const void> owner = nullptr);
  // From any thread: wakes the writers once however many changes come before they run. The
  // hub must outlive the posted wake-up: the server's io_context, or `owner`, held until then.
  void wake(std::shared_ptr<const void> owner = nullptr);
  void close_all();

  int64_t count() const { return *slots_; }  // browsers connected (slots taken); any thread
  std::atomic<int64_t> bad_messages{0};

 private:
  friend class WsSession;
  void add(const std::shared_ptr<WsSession>& s);
  void pump_all();

  net::asio::any_io_executor ex_;
  // Shared with the slots, which may outlive the hub (a session still queued on the io_context
  // when the server is destroyed).
  std::shared_ptr<std::atomic<int64_t>> slots_ = std::make_shared<std::atomic<int64_t>>(0);
  std::vector<std::weak_ptr<WsSession>> sessions_;
  std::atomic<bool> wake_pending_{false};
};

}  // namespace lingbot::viewer
