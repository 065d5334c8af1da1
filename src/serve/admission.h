// Admission control: each device has a budget of bytes its sessions may hold (free memory after
// the weights, measured once); a session reserves its preflight estimate until it ends. A stream
// is placed on the device with the most room left after its reservation, or refused when it fits
// on none: refused up front with the numbers rather than an allocation failing mid-stream.
#pragma once

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "lingbot/server.h"

namespace lingbot::serve {

class Admission {
 public:
  struct Device {
    std::string name;
    size_t budget = 0;
  };
  explicit Admission(std::vector<Device> devices);

  struct Decision {
    int device = -1;  // -1: refused
    size_t need = 0;  // the estimate on the chosen device (refused: on the roomiest one)
    size_t free = 0;  // room on that device before this stream
  };
  // `need[i]`: the stream's estimate on device i. Reserves it on the chosen device.
  Decision admit(const std::vector<size_t>& need);
  // Gives a reservation back (any thread).
  void release(int device, size_t bytes);
  std::vector<ServedDeviceStats> devices() const;

 private:
  mutable std::mutex mu_;
  std::vector<ServedDeviceStats> devices_;
};

// A reservation held by a session, given back when it is destroyed.
class Reservation {
 public:
  Reservation(Admission& admission, int device, size_t bytes)
      : admission_(admission), device_(device), bytes_(bytes) {}
  ~Reservation() { admission_.release(device_, bytes_); }
  Reservation(const Reservation&) = delete;
  Reservation& operator=(const Reservation&) = delete;

 private:
  Admission& admission_;
  int device_;
  size_t bytes_;
};

}  // namespace lingbot::serve
