#include "job/durable_writer.h"

#include <algorithm>

#include "common/log.h"

namespace moerl::job {

durable_writer::durable_writer(size_t max_pending)
    : max_pending_(std::max<size_t>(max_pending, 1)), thread_([this] { run(); }) {}

durable_writer::~durable_writer() {
  {
    std::lock_guard<std::mutex> g(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void durable_writer::submit(std::string what, std::function<status()> write) {
  std::unique_lock<std::mutex> g(mu_);
  cv_.wait(g, [&] { return queue_.size() < max_pending_; });
  queue_.emplace_back(std::move(what), std::move(write));
  cv_.notify_all();
}

void durable_writer::flush() {
  std::unique_lock<std::mutex> g(mu_);
  cv_.wait(g, [&] { return queue_.empty() && !busy_; });
}

bool durable_writer::idle() const {
  std::lock_guard<std::mutex> g(mu_);
  return queue_.empty() && !busy_;
}

uint64_t durable_writer::num_written() const {
  std::lock_guard<std::mutex> g(mu_);
  return written_;
}

uint64_t durable_writer::num_failed() const {
  std::lock_guard<std::mutex> g(mu_);
  return failed_;
}

std::string durable_writer::last_failure() const {
  std::lock_guard<std::mutex> g(mu_);
  return last_failure_;
}

void durable_writer::run() {
  std::unique_lock<std::mutex> g(mu_);
  for (;;) {
    cv_.wait(g, [&] { return stop_ || !queue_.empty(); });
    if (queue_.empty()) return;  // stopping, and every write is done
    auto [what, write] = std::move(queue_.front());
    queue_.pop_front();
    busy_ = true;
    cv_.notify_all();  // room for a submitter
    g.unlock();
    const status st = write();
    if (!st) logger("trainer")->error("durable write of {} failed: {}", what, st.err().to_string());
    g.lock();
    busy_ = false;
    ++(st ? written_ : failed_);
    if (!st) last_failure_ = what + ": " + st.err().to_string();
    cv_.notify_all();
  }
}

}  // namespace moerl::job
