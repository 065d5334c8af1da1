// Video input: the live queue's drop-oldest policy, the reference demo's sampling, and (in
// builds with FFmpeg) decoding clips encoded by the test itself.
#include "io/video.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <fstream>
#include <random>
#include <thread>
#include <vector>

#include "lingbot/error.h"
#include "test_util.h"
#include "video_test_util.h"

namespace lingbot {
namespace {

using namespace std::chrono_literals;

TEST(DropOldestQueue, AFullQueueDropsItsOldestAndCountsIt) {
  DropOldestQueue<int> q(2);
  for (int i = 0; i < 5; ++i) q.push(i);
  EXPECT_EQ(q.size(), 2u);
  EXPECT_EQ(q.dropped(), 3);
  EXPECT_EQ(q.pop(), 3);
  EXPECT_EQ(q.pop(), 4);
  q.push(5);
  q.close();
  q.push(6);  // after close: ignored
  EXPECT_EQ(q.pop(), 5);
  EXPECT_EQ(q.pop(), std::nullopt);
  EXPECT_EQ(q.dropped(), 3);
}

TEST(DropOldestQueue, PopWaitsForAPushAndCloseWakesIt) {
  DropOldestQueue<int> q(1);
  std::thread producer([&] {
    std::this_thread::sleep_for(20ms);
    q.push(7);
  });
  EXPECT_EQ(q.pop(), 7);
  producer.join();
  std::thread closer([&] {
    std::this_thread::sleep_for(20ms);
    q.close();
  });
  EXPECT_EQ(q.pop(), std::nullopt);
  closer.join();
}

// A producer far faster than its consumer: the consumer sees ever newer items, never more than
// the capacity is held, and every item is either delivered or counted as dropped.
TEST(DropOldestQueue, SlowConsumerKeepsUpWithTheNewestAndMemoryStaysBounded) {
  constexpr int kItems = 400;
  DropOldestQueue<int> q(2);
  std::atomic<size_t> largest{0};
  std::thread producer([&] {
    for (int i = 0; i < kItems; ++i) {
      q.push(i);
      largest = std::max(largest.load(), q.size());
      if (i % 50 == 0) std::this_thread::sleep_for(1ms);
    }
    q.close();
  });
  std::vector<int> got;
  while (auto v = q.pop()) {
    got.push_back(*v);
    std::this_thread::sleep_for(2ms);
  }
  producer.join();
  EXPECT_LE(largest.load(), 2u);
  EXPECT_GT(q.dropped(), 0);
  EXPECT_EQ(static_cast<int64_t>(got.size()) + q.dropped(), kItems);
  for (size_t i = 1; i < got.size(); ++i) EXPECT_GT(got[i], got[i - 1]);
  EXPECT_EQ(got.back(), kItems - 1);  // the last frame of a stream is never lost
}

TEST(VideoSampling, IntervalIsTheReferenceDemos) {
  EXPECT_EQ(sampling_interval(30, 10), 3);
  EXPECT_EQ(sampling_interval(10, 5), 2);
  EXPECT_EQ(sampling_interval(25, 10), 2);  // round half to even, as Python
  EXPECT_EQ(sampling_interval(35, 10), 4);
  EXPECT_EQ(sampling_interval(29.97, 10), 3);
  EXPECT_EQ(sampling_interval(5, 10), 1);
  EXPECT_EQ(sampling_interval(30, 0), 1);
}

TEST(VideoSampling, FirstKCountsSampledFramesThenStrideThins) {
  FrameSampler s(2, 5, 2);  // decoded 0,2,4,6,8 sampled; of those every 2nd
  std::vector<int64_t> kept;
  for (int64_t i = 0; i < 20 && !s.done(); ++i)
    if (s.keep(i)) kept.push_back(i);
  EXPECT_EQ(kept, (std::vector<int64_t>{0, 4, 8}));
  EXPECT_TRUE(s.done());
  EXPECT_EQ(s.kept_of(20), 3);
  EXPECT_EQ(FrameSampler(3, 0, 1).kept_of(10), 4);
  EXPECT_EQ(FrameSampler(1, 0, 4).kept_of(10), 3);
}

class VideoInputKind : public test::TempDirTest {};

TEST_F(VideoInputKind, FoldersFilesStreamsAndImages) {
  EXPECT_EQ(classify_input(dir_.string()), InputKind::Folder);
  EXPECT_EQ(classify_input("rtsp://127.0.0.1:9/none"), InputKind::Live);
  EXPECT_EQ(classify_input("http://example.invalid/a.mp4"), InputKind::Live);
  std::ofstream(path("clip.mp4")) << "x";
  EXPECT_EQ(classify_input(path("clip.mp4")), InputKind::VideoFile);
  std::ofstream(path("photo.JPG")) << "x";
  EXPECT_EQ(classify_input(path("photo.JPG")), InputKind::Image);
  EXPECT_THROW(classify_input(path("absent.mp4")), Error);
}

#if LINGBOT_HAVE_FFMPEG

class VideoReaderTest : public test::TempDirTest {};

TEST_F(VideoReaderTest, DecodesEveryFrameWithTimesAndColours) {
  ASSERT_EQ(test::encode_test_video(path("clip.avi"), 112, 84, 12, 10), "");
  auto r = VideoReader::open(path("clip.avi"), {});
  EXPECT_FALSE(r->live());
  EXPECT_NEAR(r->source_fps(), 10, 1e-9);
  EXPECT_EQ(r->expected_frames(), 12);
  int k = 0;
  while (auto f = r->next()) {
    ASSERT_EQ(f->image.width, 112);
    ASSERT_EQ(f->image.height, 84);
    EXPECT_NEAR(f->timestamp, 0.1 * k, 1e-6);
    double err = 0;
    for (int y = 0; y < 84; ++y)
      for (int x = 0; x < 112; ++x) {
        uint8_t want[3];
        test::pattern_pixel(k, x, y, want);
        for (int c = 0; c < 3; ++c)
          err += std::abs(int(f->image.rgb[(size_t(y) * 112 + x) * 3 + c]) - int(want[c]));
      }
    EXPECT_LT(err / (112 * 84 * 3), 8.0) << "frame " << k;
    ++k;
  }
  EXPECT_EQ(k, 12);
  EXPECT_EQ(r->dropped(), 0);
}

TEST_F(VideoReaderTest, SamplesByFpsFirstKAndStride) {
  ASSERT_EQ(test::encode_test_video(path("clip.mkv"), 70, 56, 12, 10, "ffv1"), "");
  auto times = [&](VideoOptions o) {
    std::vector<double> t;
    auto r = VideoReader::open(path("clip.mkv"), o);
    while (auto f = r->next()) t.push_back(std::round(f->timestamp * 10) / 10);
    return t;
  };
  EXPECT_EQ(times({.fps = 5}), (std::vector<double>{0, 0.2, 0.4, 0.6, 0.8, 1.0}));
  EXPECT_EQ(times({.fps = 5, .first_k = 4, .stride = 2}), (std::vector<double>{0, 0.4}));
  EXPECT_EQ(times({.stride = 5}), (std::vector<double>{0, 0.5, 1.0}));
  EXPECT_EQ(times({.first_k = 3}), (std::vector<double>{0, 0.1, 0.2}));
}

// The live path on a file played at its own rate: a consumer slower than 10 frames/s loses
// frames, and every frame is either delivered or counted.
TEST_F(VideoReaderTest, RealtimePlaybackDropsWhatASlowConsumerMisses) {
  ASSERT_EQ(test::encode_test_video(path("clip.avi"), 70, 56, 12, 10, "mjpeg"), "");
  auto r = VideoReader::open(path("clip.avi"), {.queue_capacity = 1, .realtime = true});
  EXPECT_TRUE(r->live());
  std::vector<double> t;
  while (auto f = r->next()) {
    t.push_back(f->timestamp);
    std::this_thread::sleep_for(250ms);
  }
  EXPECT_GT(r->dropped(), 0);
  EXPECT_EQ(static_cast<int64_t>(t.size()) + r->dropped(), 12);
  EXPECT_NEAR(t.back(), 1.1, 1e-6);
}

TEST_F(VideoReaderTest, BadFilesFailWithTheirName) {
  std::ofstream(path("empty.mp4")).flush();
  std::mt19937 rng(1);
  std::string noise(20000, '\0');
  for (char& c : noise) c = static_cast<char>(rng());
  std::ofstream(path("noise.mp4"), std::ios::binary) << noise;
  test::write_silent_wav(path("sound.wav"));
  for (const char* name : {"empty.mp4", "noise.mp4", "sound.wav"}) {
    try {
      auto r = VideoReader::open(path(name), {});
      while (r->next()) {
      }
      ADD_FAILURE() << name << " was accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(name), std::string::npos) << e.what();
    }
  }
}

TEST(VideoReaderStream, UnreachableUrlFailsFast) {
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_THROW(VideoReader::open("rtsp://127.0.0.1:9/none", {.timeout_s = 2}), Error);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 10s);
}

#else

TEST(VideoReaderTest, ThisBuildSaysItHasNoVideoSupport) {
  try {
    VideoReader::open("clip.mp4", {});
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("no video support"), std::string::npos);
  }
}

#endif

}  // namespace
}  // namespace lingbot
