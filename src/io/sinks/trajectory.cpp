// Camera trajectories in the two text formats evaluation tools (evo, the KITTI devkit) read.
#include <utility>

#include "io/sinks/sink.h"
#include "io/sinks/sink_util.h"

namespace lingbot {
namespace {

class TrajectorySink : public ResultSink {
 public:
  TrajectorySink(const std::string& path, TrajectoryFormat format,
                 std::function<double(int64_t)> timestamp)
      : file_(path, false), format_(format), timestamp_(std::move(timestamp)) {}
  std::string name() const override { return format_ == TrajectoryFormat::TUM ? "tum" : "kitti"; }

  void add(const FrameResult& r, const Tensor*) override {
    using sinks::fmt;
    std::string line;
    if (format_ == TrajectoryFormat::TUM) {
      const double t = timestamp_ ? timestamp_(r.index) : static_cast<double>(r.index);
      const auto q = sinks::rotation_to_quaternion(r.c2w);
      line = fmt(t);
      for (int i : {3, 7, 11}) line.append(" ").append(fmt(r.c2w[i]));
      for (double v : q) line.append(" ").append(fmt(static_cast<float>(v)));
    } else {
      for (int i = 0; i < 12; ++i) line.append(i ? " " : "").append(fmt(r.c2w[i]));
    }
    line += "\n";
    file_.write(line);
    file_.flush();
  }

  void finish() override { file_.close(); }

 private:
  sinks::OutFile file_;
  TrajectoryFormat format_;
  std::function<double(int64_t)> timestamp_;
};

}  // namespace

std::unique_ptr<ResultSink> make_trajectory_sink(const std::string& path, TrajectoryFormat format,
                                                 std::function<double(int64_t)> timestamp) {
  return std::make_unique<TrajectorySink>(path, format, std::move(timestamp));
}

}  // namespace lingbot
