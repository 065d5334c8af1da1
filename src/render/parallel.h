// A loop over OpenMP's threads that reports failures as exceptions.
#pragma once

#include <cstdint>
#include <exception>
#include <mutex>

namespace lingbot::render {

// fn(i) for every i in [0, n), spread over the threads; the first exception thrown is rethrown
// here once all have finished (one escaping a parallel region would end the program).
template <class F>
void parallel_for(int64_t n, F&& fn) {
  std::exception_ptr failure;
  std::mutex failure_mutex;
#pragma omp parallel for schedule(dynamic, 1)
  for (int64_t i = 0; i < n; ++i) {
    try {
      fn(i);
    } catch (...) {
      std::lock_guard<std::mutex> lock(failure_mutex);
      if (!failure) failure = std::current_exception();
    }
  }
  if (failure) std::rethrow_exception(failure);
}

}  // namespace lingbot::render
