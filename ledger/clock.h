// The ledger's only notion of time. Injected so that lease expiry is deterministic in
// tests (manual_clock) and real in nodes (steady_clock_source). Milliseconds, monotonic.
#pragma once

#include <atomic>
#include <cstdint>

namespace moerl::ledger {

class clock {
 public:
  virtual ~clock() = default;
  // Milliseconds on a monotonic time line; only differences matter.
  virtual int64_t now_ms() const = 0;
};

// std::chrono::steady_clock. Safe to call from any thread.
class steady_clock_source final : public clock {
 public:
  int64_t now_ms() const override;
};

// Time moves only when a test says so. Safe to read from any thread.
class manual_clock final : public clock {
 public:
  explicit manual_clock(int64_t start_ms = 0) : now_(start_ms) {}
  int64_t now_ms() const override { return now_.load(); }
  void advance(int64_t delta_ms) { now_.fetch_add(delta_ms); }
  void set(int64_t t_ms) { now_.store(t_ms); }

 private:
  std::atomic<int64_t> now_;
};

}  // namespace moerl::ledger
