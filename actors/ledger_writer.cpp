#include "actors/internal/ledger_writer.h"

#include "store/object_store.h"

namespace moerl::actors {

ledger_writer::ledger_writer(store::object_store& store, std::function<void()> done)
    : store_(store), done_(std::move(done)), thread_([this] { run(); }) {}

ledger_writer::~ledger_writer() {
  {
    std::lock_guard<std::mutex> g(mu_);
    stop_ = true;
  }
  wake_.notify_all();
  thread_.join();
}

bool ledger_writer::start(ledger::work_ledger::sync_batch& batch) {
  {
    std::lock_guard<std::mutex> g(mu_);
    if (slot_ != slot::empty) return false;
    batch_ = std::move(batch);
    slot_ = slot::to_write;
  }
  wake_.notify_all();
  return true;
}

std::optional<std::pair<ledger::work_ledger::sync_batch, status>> ledger_writer::take() {
  std::lock_guard<std::mutex> g(mu_);
  if (slot_ != slot::written) return std::nullopt;
  slot_ = slot::empty;
  return std::make_pair(std::move(batch_), std::move(written_));
}

void ledger_writer::run() {
  for (;;) {
    ledger::work_ledger::sync_batch batch;
    {
      std::unique_lock<std::mutex> g(mu_);
      wake_.wait(g, [this] { return stop_ || slot_ == slot::to_write; });
      if (slot_ != slot::to_write) return;  // stopping with nothing to write
      batch = std::move(batch_);
    }
    // The batch is ours alone while written: the store is thread-safe (object_store.h).
    status written = ledger::work_ledger::write_sync(store_, batch);
    {
      std::lock_guard<std::mutex> g(mu_);
      batch_ = std::move(batch);
      written_ = std::move(written);
      slot_ = slot::written;
    }
    done_();
  }
}

}  // namespace moerl::actors
