// Batched steps of the sessions of one engine. Sessions pushed from different threads hand
// their steps here; one-frame steps waiting together run as one model step (Model::enqueue over
// several sequences).
//
// Policy (group commit, no timer): a step that arrives while none runs is run at once by the
// thread that brought it. Steps that arrive while one runs wait; when it ends, one of their
// threads takes every waiting one-frame step of the first one's frame size (a multi-frame step,
// phase 1, goes alone) and runs them together, the others wait for that one to finish. So a lone
// session never waits for a partner, and under load every step takes the frames ready by then.
// Every waiting step is taken by the next run that reaches its turn, so none waits forever.
#pragma once

#include <condition_variable>
#include <deque>
#include <exception>
#include <mutex>
#include <vector>

#include "model/model.h"

namespace lingbot {

class StepScheduler {
 public:
  explicit StepScheduler(Model& model) : model_(model) {}

  // Model::enqueue of one sequence's step, perhaps in a batch with other sequences' steps;
  // returns once the step is queued (its results are collected per sequence, Model::collect).
  // A bad step fails here, in its own thread, before it can join a batch.
  void enqueue(SequenceState& seq, const Tensor& images01, StepMode mode);

  // How many model steps ran, and how many sequence steps they carried (for tests).
  struct Counts {
    int64_t steps = 0, parts = 0;
  };
  Counts counts() const;

 private:
  struct Request {
    Model::Part part;
    bool done = false;
    std::exception_ptr error;
  };
  // The waiting requests the next run takes (mu_ held); they leave waiting_.
  std::vector<Request*> take_batch();

  Model& model_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Request*> waiting_;
  bool running_ = false;
  Counts counts_;
};

}  // namespace lingbot
