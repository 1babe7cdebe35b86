// The trainer's background store copies (job/durable_writer.h), writing to a real local
// store: writes run in submission order off the caller's thread, a failed write is counted
// and does not stop the ones after it, flush() waits for all, the destructor finishes what is
// queued, and a full queue makes submit() wait instead of growing.
#include "job/durable_writer.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <future>
#include <mutex>
#include <thread>
#include <vector>

#include "common/config.h"
#include "store/object_store.h"
#include "tests/support/temp_dir.h"

namespace moerl::job {
namespace {

std::unique_ptr<store::object_store> local_store(const testing::temp_dir& dir) {
  auto s = store::open_store(dir.path(), config::defaults());
  EXPECT_TRUE(s) << s.err().to_string();
  return std::move(*s);
}

TEST(durable_writer, WritesInOrderOffTheCallersThreadAndCountsFailures) {
  testing::temp_dir dir("durable-writer");
  auto store = local_store(dir);
  std::mutex mu;
  std::vector<int> order;
  const auto caller = std::this_thread::get_id();
  std::atomic<bool> on_caller{false};
  durable_writer w(8);
  for (int i = 0; i < 5; ++i) {
    w.submit("object " + std::to_string(i), [&, i]() -> status {
      if (std::this_thread::get_id() == caller) on_caller = true;
      {
        std::lock_guard<std::mutex> g(mu);
        order.push_back(i);
      }
      if (i == 2) return error(errc::io_error, "a store that refused this one");
      return store->put("obj/" + std::to_string(i), std::string(100, static_cast<char>('a' + i)));
    });
  }
  w.flush();
  EXPECT_EQ(order, (std::vector<int>{0, 1, 2, 3, 4}));
  EXPECT_FALSE(on_caller);
  EXPECT_EQ(w.num_written(), 4u);
  EXPECT_EQ(w.num_failed(), 1u);
  for (int i : {0, 1, 3, 4}) {
    auto got = store->get("obj/" + std::to_string(i));
    ASSERT_TRUE(got) << got.err().to_string();
    EXPECT_EQ(*got, std::string(100, static_cast<char>('a' + i)));
  }
  EXPECT_FALSE(store->get("obj/2"));
}

TEST(durable_writer, DestructorFinishesEveryQueuedWrite) {
  testing::temp_dir dir("durable-writer");
  auto store = local_store(dir);
  {
    durable_writer w(16);
    for (int i = 0; i < 10; ++i)
      w.submit("object " + std::to_string(i),
               [&, i] { return store->put("q/" + std::to_string(i), "x"); });
  }
  for (int i = 0; i < 10; ++i) EXPECT_TRUE(store->get("q/" + std::to_string(i))) << i;
}

TEST(durable_writer, SubmitWaitsWhileTheQueueIsFull) {
  durable_writer w(1);
  std::promise<void> release;
  std::shared_future<void> released = release.get_future().share();
  std::atomic<int> started{0};
  auto blocked = [&]() -> status {
    ++started;
    released.wait();
    return ok_status();
  };
  w.submit("first", blocked);  // taken by the writer thread
  while (started == 0) std::this_thread::yield();
  w.submit("second", blocked);  // fills the one queue slot
  std::atomic<bool> third_in{false};
  std::thread submitter([&] {
    w.submit("third", blocked);
    third_in = true;
  });
  // The writer is held on "first" and the queue is full, so "third" cannot be accepted until
  // something is released; its submit returning now would be the bug.
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_FALSE(third_in);
  release.set_value();
  submitter.join();
  w.flush();
  EXPECT_TRUE(third_in);
  EXPECT_EQ(w.num_written(), 3u);
}

}  // namespace
}  // namespace moerl::job
