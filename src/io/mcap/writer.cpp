#include "io/mcap/writer.h"

#include <zlib.h>
#include <zstd.h>

#include <limits>

#include "lingbot/error.h"

namespace lingbot::mcap {
namespace {

// The specification's opcodes.
enum Op : uint8_t {
  kHeader = 0x01,
  kFooter = 0x02,
  kSchema = 0x03,
  kChannel = 0x04,
  kMessage = 0x05,
  kChunk = 0x06,
  kMessageIndex = 0x07,
  kChunkIndex = 0x08,
  kStatistics = 0x0B,
  kSummaryOffset = 0x0E,
  kDataEnd = 0x0F,
};
constexpr std::string_view kMagic("\x89MCAP0\r\n", 8);

// Little-endian fields as the specification lays them out.
template <class T>
void put(std::string& out, T v) {
  for (size_t b = 0; b < sizeof(T); ++b) out.push_back(static_cast<char>((v >> (8 * b)) & 0xff));
}
uint32_t len32(size_t n) {
  LINGBOT_CHECK(n <= std::numeric_limits<uint32_t>::max(), "MCAP: a field over 4 GB");
  return static_cast<uint32_t>(n);
}
void put_string(std::string& out, std::string_view s) {  // String: uint32 length, bytes
  put(out, len32(s.size()));
  out.append(s);
}
std::string record(Op op, std::string_view content) {  // opcode, uint64 length, content
  std::string r;
  r.reserve(9 + content.size());
  r.push_back(static_cast<char>(op));
  put<uint64_t>(r, content.size());
  r.append(content);
  return r;
}
uint32_t crc(std::string_view bytes, uint32_t running = 0) {
  // zlib's CRC-32 is the specification's (IEEE 802.3); it takes at most 4 GB a call.
  uLong c = running;
  while (!bytes.empty()) {
    const size_t n = std::min<size_t>(bytes.size(), 1u << 30);
    c = crc32(c, reinterpret_cast<const Bytef*>(bytes.data()), static_cast<uInt>(n));
    bytes.remove_prefix(n);
  }
  return static_cast<uint32_t>(c);
}

}  // namespace

struct Writer::Zstd {
  ZSTD_CCtx* ctx = ZSTD_createCCtx();
  ~Zstd() { ZSTD_freeCCtx(ctx); }
};

Writer::Writer(const std::string& path, WriterOptions options)
    : o_(std::move(options)), file_(path, true) {
  if (o_.zstd_level != 0) {
    zstd_ = std::make_unique<Zstd>();
    LINGBOT_CHECK(zstd_->ctx, "MCAP: cannot create a zstd context");
  }
  emit(kMagic);
  std::string h;
  put_string(h, o_.profile);
  put_string(h, o_.library);
  emit(record(kHeader, h));
  file_.flush();
}

Writer::~Writer() {
  if (finished_) return;
  try {
    close_chunk();
  } catch (...) {  // a destructor must not throw; the file keeps its earlier chunks
  }
}

void Writer::emit(std::string_view bytes) {
  data_crc_ = crc(bytes, data_crc_);
  file_.write(bytes);
}

uint16_t Writer::add_schema(const std::string& name, const std::string& encoding,
                            const std::string& data) {
  LINGBOT_CHECK(!finished_ && schema_records_.size() < 65535, "MCAP: cannot add a schema");
  const uint16_t id = static_cast<uint16_t>(schema_records_.size() + 1);
  std::string c;
  put(c, id);
  put_string(c, name);
  put_string(c, encoding);
  put(c, len32(data.size()));  // Bytes with a uint32 length
  c.append(data);
  schema_records_.push_back(record(kSchema, c));
  emit(schema_records_.back());
  return id;
}

uint16_t Writer::add_channel(uint16_t schema_id, const std::string& topic,
                             const std::string& message_encoding,
                             const std::vector<std::pair<std::string, std::string>>& metadata) {
  LINGBOT_CHECK(!finished_ && channel_records_.size() < 65535, "MCAP: cannot add a channel");
  LINGBOT_CHECK(schema_id <= schema_records_.size(),
                "MCAP: channel " + topic + " names an unknown schema");
  const uint16_t id = static_cast<uint16_t>(channel_records_.size() + 1);
  std::string c;
  put(c, id);
  put(c, schema_id);
  put_string(c, topic);
  put_string(c, message_encoding);
  std::string map;
  for (const auto& [k, v] : metadata) {
    put_string(map, k);
    put_string(map, v);
  }
  put_string(c, map);  // Map: uint32 byte length, entries
  channel_records_.push_back(record(kChannel, c));
  sequence_.push_back(0);
  emit(channel_records_.back());
  return id;
}

void Writer::write(uint16_t channel_id, uint64_t log_time, std::string_view data) {
  LINGBOT_CHECK(!finished_, "MCAP: write after finish");
  LINGBOT_CHECK(channel_id >= 1 && channel_id <= channel_records_.size(),
                "MCAP: message on unknown channel " + std::to_string(channel_id));
  if (!chunk_.empty() && log_time > chunk_end_ &&
      (chunk_.size() >= o_.chunk_bytes || log_time - chunk_start_ >= o_.chunk_ns))
    close_chunk();
  if (chunk_.empty()) chunk_start_ = chunk_end_ = log_time;
  chunk_start_ = std::min(chunk_start_, log_time);
  chunk_end_ = std::max(chunk_end_, log_time);
  chunk_messages_[channel_id].emplace_back(log_time, chunk_.size());
  // The record written in place: a message can be tens of megabytes.
  chunk_.push_back(static_cast<char>(kMessage));
  put<uint64_t>(chunk_, 2 + 4 + 8 + 8 + data.size());
  put(chunk_, channel_id);
  put(chunk_, sequence_[channel_id - 1]++);
  put(chunk_, log_time);
  put(chunk_, log_time);
  chunk_.append(data);
  if (message_count_ == 0) first_time_ = last_time_ = log_time;
  first_time_ = std::min(first_time_, log_time);
  last_time_ = std::max(last_time_, log_time);
  ++message_count_;
  ++channel_counts_[channel_id];
}

void Writer::close_chunk() {
  if (chunk_.empty()) return;
  std::string_view stored = chunk_;
  std::string compression;
  if (zstd_) {
    compressed_.resize(ZSTD_compressBound(chunk_.size()));
    const size_t n = ZSTD_compressCCtx(zstd_->ctx, compressed_.data(), compressed_.size(),
                                       chunk_.data(), chunk_.size(), o_.zstd_level);
    LINGBOT_CHECK(!ZSTD_isError(n),
                  std::string("MCAP: zstd compression failed: ") + ZSTD_getErrorName(n));
    stored = std::string_view(compressed_.data(), n);
    compression = "zstd";
  }
  std::string c;
  put(c, chunk_start_);
  put(c, chunk_end_);
  put<uint64_t>(c, chunk_.size());
  put(c, crc(chunk_));
  put_string(c, compression);
  put<uint64_t>(c, stored.size());  // records: uint64 length, bytes
  c.append(stored);
  ChunkIndex ci{.start_time = chunk_start_,
                .end_time = chunk_end_,
                .offset = static_cast<uint64_t>(file_.size()),
                .length = 0,
                .message_index_offsets = {},
                .message_index_length = 0,
                .compressed_size = stored.size(),
                .uncompressed_size = chunk_.size()};
  const std::string chunk_record = record(kChunk, c);
  ci.length = chunk_record.size();
  std::string indexes;
  for (const auto& [channel, entries] : chunk_messages_) {
    ci.message_index_offsets[channel] = ci.offset + ci.length + indexes.size();
    std::string m;
    put(m, channel);
    put(m, len32(entries.size() * 16));  // Array: uint32 byte length, (Timestamp, uint64) pairs
    for (const auto& [time, offset] : entries) {
      put(m, time);
      put(m, offset);
    }
    indexes += record(kMessageIndex, m);
  }
  ci.message_index_length = indexes.size();
  emit(chunk_record);
  emit(indexes);
  file_.flush();
  chunk_index_.push_back(std::move(ci));
  chunk_.clear();
  chunk_messages_.clear();
}

void Writer::finish() {
  if (finished_) return;
  close_chunk();
  finished_ = true;
  std::string end;
  put(end, data_crc_);
  file_.write(record(kDataEnd, end));

  // The summary: one group per record kind, each listed by a SummaryOffset record.
  const uint64_t summary_start = static_cast<uint64_t>(file_.size());
  std::string summary;
  std::vector<std::pair<Op, std::pair<uint64_t, uint64_t>>> groups;
  auto group = [&](Op op, const std::vector<std::string>& records) {
    if (records.empty()) return;
    const uint64_t start = summary_start + summary.size();
    for (const std::string& r : records) summary += r;
    groups.push_back({op, {start, summary_start + summary.size() - start}});
  };
  group(kSchema, schema_records_);
  group(kChannel, channel_records_);
  std::string s;
  put<uint64_t>(s, message_count_);
  put(s, static_cast<uint16_t>(schema_records_.size()));
  put(s, static_cast<uint32_t>(channel_records_.size()));
  put<uint32_t>(s, 0);  // attachments
  put<uint32_t>(s, 0);  // metadata
  put(s, static_cast<uint32_t>(chunk_index_.size()));
  put(s, message_count_ ? first_time_ : 0);
  put(s, message_count_ ? last_time_ : 0);
  std::string counts;
  for (const auto& [channel, n] : channel_counts_) {
    put(counts, channel);
    put(counts, n);
  }
  put_string(s, counts);
  group(kStatistics, {record(kStatistics, s)});
  std::vector<std::string> chunk_records;
  for (const ChunkIndex& ci : chunk_index_) {
    std::string c;
    put(c, ci.start_time);
    put(c, ci.end_time);
    put(c, ci.offset);
    put(c, ci.length);
    std::string offsets;
    for (const auto& [channel, offset] : ci.message_index_offsets) {
      put(offsets, channel);
      put(offsets, offset);
    }
    put_string(c, offsets);
    put(c, ci.message_index_length);
    put_string(c, zstd_ ? "zstd" : "");
    put(c, ci.compressed_size);
    put(c, ci.uncompressed_size);
    chunk_records.push_back(record(kChunkIndex, c));
  }
  group(kChunkIndex, chunk_records);
  const uint64_t offsets_start = summary_start + summary.size();
  for (const auto& [op, range] : groups) {
    std::string o;
    put(o, static_cast<uint8_t>(op));
    put(o, range.first);
    put(o, range.second);
    summary += record(kSummaryOffset, o);
  }
  // Footer: the CRC covers the summary, the summary offsets and the footer up to its own field.
  std::string footer;
  footer.push_back(static_cast<char>(kFooter));
  put<uint64_t>(footer, 8 + 8 + 4);
  put(footer, summary_start);
  put(footer, offsets_start);
  put(footer, crc(footer, crc(summary)));
  file_.write(summary);
  file_.write(footer);
  file_.write(kMagic);
  file_.close();
}

}  // namespace lingbot::mcap
