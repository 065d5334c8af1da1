#include "viewer/live_views.h"

#include "viewer/assets.h"
#include "viewer/browsers.h"
#include "viewer/scene.h"

namespace lingbot::viewer {

using namespace net;  // http, websocket

namespace {

constexpr int kMaxBrowsers = 16;  // per stream
// Frames held for browsers that join later, per stream (thinned beyond, as the viewer does).
constexpr int64_t kMaxBytes = int64_t{64} << 20;

}  // namespace

struct LiveViews::View {
  explicit View(asio::any_io_executor ex)
      : scene({.points = {.conf_threshold = 1.0f, .stride = 4}, .max_bytes = kMaxBytes}),
        hub(std::move(ex)) {}
  Scene scene;
  Hub hub;
};

namespace {

// The stream's worker thread feeds it; it never waits for a browser.
class LiveSink : public ResultSink {
 public:
  LiveSink(std::shared_ptr<LiveViews::View> view, std::function<void()> ended)
      : view_(std::move(view)), ended_(std::move(ended)) {}
  void add(const FrameResult& r, const Tensor* rgb) override { view_->scene.add(r, rgb); }
  void finish() override {
    view_->scene.finish();
    ended_();
  }
  std::string name() const override { return "live view"; }

 private:
  std::shared_ptr<LiveViews::View> view_;
  std::function<void()> ended_;
};

}  // namespace

std::shared_ptr<ResultSink> LiveViews::open(const std::string& id, int64_t expected_frames) {
  auto view = std::make_shared<View>(ex_);
  view->scene.reset("stream " + id, expected_frames);
  // The wake-up holds the view until it has run, so a view may go while one is posted.
  view->scene.on_change([w = std::weak_ptr<View>(view)] {
    if (auto v = w.lock()) v->hub.wake(v);
  });
  {
    std::lock_guard lock(mu_);
    live_[id] = view;
  }
  return std::make_shared<LiveSink>(view, [this, id] {
    std::lock_guard lock(mu_);
    live_.erase(id);
  });
}

bool LiveViews::route(const std::shared_ptr<HttpSession>& http, Request& req) {
  const std::string_view path = path_of(req);
  if (!websocket::is_upgrade(req)) {
    const Asset* a = find_asset(path);
    if (!a) return false;
    http->respond(req, http::status::ok, a->type, a->body);
    return true;
  }
  if (path != "/ws") return false;
  std::shared_ptr<View> view;
  {
    std::lock_guard lock(mu_);
    const auto it = live_.find(query_param(req, "session"));
    if (it != live_.end()) view = it->second;
  }
  if (!view) {
    http->respond(req, http::status::not_found, "text/plain", "no such live session\n");
  } else if (Hub::Slot slot = view->hub.take_slot(kMaxBrowsers)) {
    view->hub.accept(http->release_socket(), std::move(req), view->scene, std::move(slot), view);
  } else {
    http->respond(req, http::status::service_unavailable, "text/plain", "too many viewers\n");
  }
  return true;
}

void LiveViews::close_all() {
  std::lock_guard lock(mu_);
  for (auto& [id, view] : live_) {
    view->scene.on_change({});
    view->hub.close_all();
  }
}

}  // namespace lingbot::viewer
