// Live streams of the stream server in the browser viewer (`serve --view`): each stream's
// results feed a Scene of its own, and browsers attach to it at /ws?session=ID, with the same
// page and wire format as `lingbot-map view`. A stream's view lives while the stream runs and,
// after it, as long as a browser still shows it.
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "lingbot/exports.h"
#include "net/http.h"

namespace lingbot::viewer {

class LiveViews {
 public:
  explicit LiveViews(net::asio::any_io_executor ex) : ex_(std::move(ex)) {}
  // A new stream's view; the stream's worker adds its results to the sink, then finishes it
  // (which ends the view for browsers that come later).
  std::shared_ptr<ResultSink> open(const std::string& id, int64_t expected_frames);
  // On the network thread: the page and its assets, or a browser attaching to a stream. False
  // when the request is not the viewer's.
  bool route(const std::shared_ptr<net::HttpSession>& http, net::Request& req);
  void close_all();  // on the network thread

  struct View;  // a stream's Scene and its browsers

 private:
  net::asio::any_io_executor ex_;
  std::mutex mu_;
  std::map<std::string, std::shared_ptr<View>> live_;
};

}  // namespace lingbot::viewer
