// The coordinator's journal writes, off its actor thread (ledger/LEDGER.md, "Batched leasing
// and group commit"). Each group commit's fdatasync (~1-2 ms here, ~30 an iteration of the
// default `moerl up`) used to run on the actor's thread, and with one CAF worker per node
// that held up every request queued behind it, the middleman's deserialisation included.
// Now the actor hands the batch over and goes on serving; requests whose records arrive
// meanwhile wait for the next batch, so a slow disk makes batches larger, not the actor slower.
//
// One batch at a time: start() hands it to the writer thread, which writes it
// (work_ledger::write_sync) and then calls `done` on that thread (the coordinator sends
// itself a message); take() then returns the batch with the write's outcome.
#pragma once

#include <condition_variable>
#include <functional>
#include <mutex>
#include <optional>
#include <thread>
#include <utility>

#include "common/error.h"
#include "ledger/work_ledger.h"

namespace moerl::actors {

class ledger_writer {
 public:
  ledger_writer(store::object_store& store, std::function<void()> done);
  ~ledger_writer();  // finishes a batch being written, then joins the thread
  ledger_writer(const ledger_writer&) = delete;
  ledger_writer& operator=(const ledger_writer&) = delete;

  // False (and the batch untouched) while the previous batch is not taken yet.
  bool start(ledger::work_ledger::sync_batch& batch);
  // The written batch and its outcome; nullopt while it is still being written.
  std::optional<std::pair<ledger::work_ledger::sync_batch, status>> take();

 private:
  void run();

  store::object_store& store_;
  const std::function<void()> done_;
  std::mutex mu_;
  std::condition_variable wake_;
  enum class slot { empty, to_write, written } slot_ = slot::empty;
  ledger::work_ledger::sync_batch batch_;
  status written_;
  bool stop_ = false;
  std::thread thread_;  // last: started once everything above is initialised
};

}  // namespace moerl::actors
