// An MCAP file writer (the container of ROS 2 bags since Iron, and of Foxglove's recordings),
// written from the MCAP specification: magic, Header, the Schema and Channel records as they are
// added, Messages in zstd-compressed Chunks each followed by its MessageIndex records, then at
// finish() DataEnd, the summary section (Schema, Channel, Statistics and ChunkIndex records, each
// kind a group named by a SummaryOffset record), the Footer and the closing magic. Every chunk is
// on disk (flushed) once closed, so a file cut at any point reads, with a streaming reader, up to
// its last complete chunk; finish() makes it indexed (readers seek through the chunk index).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "io/sinks/sink_util.h"

namespace lingbot::mcap {

struct WriterOptions {
  std::string profile = "ros2";  // the Header's profile: "ros2" for CDR-encoded ROS 2 messages
  std::string library = "lingbot-map";
  // A chunk is closed before a message of a later log time once it holds this many bytes of
  // records or spans this much log time, so messages of one time stay in one chunk.
  size_t chunk_bytes = 4 << 20;
  uint64_t chunk_ns = 1'000'000'000;
  int zstd_level = 3;  // 0: chunks stored uncompressed (compression "")
};

class Writer {
 public:
  Writer(const std::string& path, WriterOptions options = {});
  // Without finish(): the open chunk is written (best effort) and the file left without its
  // summary, readable up to its last chunk.
  ~Writer();
  Writer(const Writer&) = delete;
  Writer& operator=(const Writer&) = delete;

  // Ids from 1, in order. The records go to the file at once, before any message using them.
  uint16_t add_schema(const std::string& name, const std::string& encoding,
                      const std::string& data);
  uint16_t add_channel(uint16_t schema_id, const std::string& topic,
                       const std::string& message_encoding,
                       const std::vector<std::pair<std::string, std::string>>& metadata = {});
  // One message; publish time = log time (nanoseconds).
  void write(uint16_t channel_id, uint64_t log_time, std::string_view data);
  void close_chunk();  // writes the open chunk, if any, and its message indexes
  void finish();       // the rest of the file; no call after it

  int64_t messages() const { return message_count_; }
  int64_t chunks() const { return static_cast<int64_t>(chunk_index_.size()); }
  const std::string& path() const { return file_.path(); }

 private:
  struct ChunkIndex {
    uint64_t start_time, end_time, offset, length;
    std::map<uint16_t, uint64_t> message_index_offsets;
    uint64_t message_index_length, compressed_size, uncompressed_size;
  };
  void emit(std::string_view bytes);  // to the file, counted in the data section's CRC

  WriterOptions o_;
  sinks::OutFile file_;
  uint32_t data_crc_ = 0;
  bool finished_ = false;
  std::vector<std::string> schema_records_, channel_records_;
  std::vector<uint32_t> sequence_;  // per channel id - 1
  std::map<uint16_t, uint64_t> channel_counts_;
  int64_t message_count_ = 0;
  uint64_t first_time_ = 0, last_time_ = 0;
  // The open chunk: its records uncompressed, times, and per channel (log time, offset) pairs.
  std::string chunk_;
  uint64_t chunk_start_ = 0, chunk_end_ = 0;
  std::map<uint16_t, std::vector<std::pair<uint64_t, uint64_t>>> chunk_messages_;
  std::vector<ChunkIndex> chunk_index_;
  struct Zstd;
  std::unique_ptr<Zstd> zstd_;
  std::string compressed_;
};

}  // namespace lingbot::mcap
