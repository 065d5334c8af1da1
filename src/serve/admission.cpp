#include "serve/admission.h"

#include "lingbot/error.h"

namespace lingbot::serve {

Admission::Admission(std::vector<Device> devices) {
  for (Device& d : devices)
    devices_.push_back({.device = std::move(d.name), .budget_bytes = d.budget});
}

Admission::Decision Admission::admit(const std::vector<size_t>& need) {
  LINGBOT_CHECK(need.size() == devices_.size(), "admission: one estimate per device");
  std::lock_guard lock(mu_);
  Decision best;
  // The device with the most room after this stream (a placement that balances the devices);
  // among devices where it does not fit, the one that comes closest, for the message.
  int64_t best_left = INT64_MIN;
  for (size_t i = 0; i < devices_.size(); ++i) {
    const ServedDeviceStats& d = devices_[i];
    const size_t room = d.budget_bytes > d.reserved_bytes ? d.budget_bytes - d.reserved_bytes : 0;
    const int64_t left = int64_t(room) - int64_t(need[i]);
    if (left > best_left) {
      best_left = left;
      best = {.device = static_cast<int>(i), .need = need[i], .free = room};
    }
  }
  if (best_left < 0) {
    best.device = -1;
    return best;
  }
  devices_[best.device].reserved_bytes += best.need;
  ++devices_[best.device].sessions;
  return best;
}

void Admission::release(int device, size_t bytes) {
  std::lock_guard lock(mu_);
  devices_.at(device).reserved_bytes -= bytes;
  --devices_.at(device).sessions;
}

std::vector<ServedDeviceStats> Admission::devices() const {
  std::lock_guard lock(mu_);
  return devices_;
}

}  // namespace lingbot::serve
