// The trainer's durable copies, written off the critical path: a version is announced once a
// checkpoint cache holds it, and its store copy is written here, in order, on one background
// thread (checkpoint shards go through one too: job/shard_checkpointer.h). A crash
// with writes still queued loses only those store copies; readers that miss every cache wait
// for a store copy briefly and a recreated trainer rewrites its own version's copy.
// Thread-safe: submit from any thread; the destructor finishes every queued write.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

#include "common/error.h"

namespace moerl::job {

class durable_writer {
 public:
  // At most max_pending writes wait; submit() blocks beyond that (a store slower than the
  // trainer slows the trainer rather than grow memory without bound).
  explicit durable_writer(size_t max_pending);
  ~durable_writer();
  durable_writer(const durable_writer&) = delete;
  durable_writer& operator=(const durable_writer&) = delete;

  // `what` names the write in the log when it fails.
  void submit(std::string what, std::function<status()> write);
  // Waits until every write submitted so far is done.
  void flush();
  // No write queued or running.
  bool idle() const;
  uint64_t num_written() const;
  uint64_t num_failed() const;
  // The newest failed write, named, with its error ("" when none failed): what a caller that
  // gives up because of failed writes reports as the cause.
  std::string last_failure() const;

 private:
  void run();
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::pair<std::string, std::function<status()>>> queue_;
  size_t max_pending_;
  bool busy_ = false, stop_ = false;
  uint64_t written_ = 0, failed_ = 0;
  std::string last_failure_;
  std::thread thread_;
};

}  // namespace moerl::job
