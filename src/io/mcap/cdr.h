// CDR encoding of ROS 2 messages (what rmw implementations put on the wire and rosbag2 stores):
// OMG XCDR version 1, little-endian, the plain (final) encoding ROS 2 messages use. A message is
// the 4-byte encapsulation header 00 01 00 00 (CDR_LE) followed by its fields in declaration
// order, each primitive aligned to its own size (at most 8) counted from the end of the header;
// strings are a uint32 length counting a terminating NUL, the bytes and the NUL; sequences a
// uint32 element count and the elements; fixed arrays the elements alone.
#pragma once

#include <bit>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

namespace lingbot::mcap {

class CdrWriter {
 public:
  CdrWriter() { buf_.assign("\x00\x01\x00\x00", 4); }

  void u8(uint8_t v) { buf_.push_back(static_cast<char>(v)); }
  void boolean(bool v) { u8(v ? 1 : 0); }
  void u32(uint32_t v) { put(v); }
  void i32(int32_t v) { put(v); }
  void f32(float v) { put(v); }
  void f64(double v) { put(v); }
  void string(std::string_view s);
  // sequence<T>: the count; the caller writes the elements.
  void sequence(size_t count);
  // sequence<uint8>: count and bytes.
  void bytes(std::string_view data);
  // Reserves an aligned sequence<uint8> of `count` bytes and returns where its bytes start in
  // data(), for writers that fill a large payload in place.
  size_t reserve_bytes(size_t count);

  std::string& data() { return buf_; }
  const std::string& data() const { return buf_; }

 private:
  // Pads with zeros to a multiple of n, counted from the end of the encapsulation header.
  void align(size_t n) {
    const size_t pos = buf_.size() - 4;
    if (pos % n) buf_.append(n - pos % n, '\0');
  }
  // Little-endian machines only (x86-64, aarch64 as the project builds): the bytes as they are.
  template <class T>
  void put(T v) {
    static_assert(std::endian::native == std::endian::little);
    align(sizeof(T));
    char b[sizeof(T)];
    std::memcpy(b, &v, sizeof(T));
    buf_.append(b, sizeof(T));
  }
  std::string buf_;
};

}  // namespace lingbot::mcap
