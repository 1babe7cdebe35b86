// ask_monitored (actors/internal/monitored_ask.h): a question to a remote actor ends as soon as
// its answer cannot come. The remote peer is a real second process (a forked child with its own
// actor system and middleman, published on loopback), so a dropped link is a real one: the
// child is killed with SIGKILL while the question waits.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <caf/all.hpp>
#include <caf/io/all.hpp>
#include <chrono>
#include <string>
#include <thread>

#include "actors/internal/monitored_ask.h"

namespace moerl::actors {
namespace {

using namespace std::chrono_literals;

// A peer that answers "pong" to "ping", the asking actor's id to "who", "late answer" 300 ms
// after "late", and never answers "hold".
caf::behavior answering_peer(caf::event_based_actor* self) {
  return {[self](const std::string& q) -> caf::result<std::string> {
    if (q == "ping") return std::string("pong");
    if (q == "who") return std::to_string(self->current_sender()->id());
    if (q == "late")
      self->delayed_send(caf::actor_cast<caf::actor>(self->current_sender()), 300ms,
                         std::string("late answer"));
    return caf::delegated<std::string>{};  // "hold": no answer, ever
  }};
}

caf::actor_system_config& with_middleman(caf::actor_system_config& cfg) {
  cfg.load<caf::io::middleman>();
  return cfg;
}

// A child process publishing answering_peer on a loopback port; killed by the destructor.
class peer_process {
 public:
  peer_process() {
    int fds[2];
    if (::pipe(fds) != 0) return;
    pid_ = ::fork();
    if (pid_ == 0) {
      ::close(fds[0]);
      caf::actor_system_config cfg;
      caf::actor_system sys{with_middleman(cfg)};
      auto port = sys.middleman().publish(sys.spawn(answering_peer), 0, "127.0.0.1");
      uint16_t p = port ? *port : 0;
      if (::write(fds[1], &p, sizeof p) != sizeof p) ::_exit(1);
      for (;;) ::pause();
    }
    ::close(fds[1]);
    if (::read(fds[0], &port_, sizeof port_) != sizeof port_) port_ = 0;
    ::close(fds[0]);
  }
  ~peer_process() { kill(); }
  uint16_t port() const { return port_; }
  void kill() {
    if (pid_ <= 0) return;
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
    pid_ = -1;
  }

 private:
  pid_t pid_ = -1;
  uint16_t port_ = 0;
};

class monitored_ask_test : public ::testing::Test {
 protected:
  // Forked before this process starts an actor system: the child must not inherit its threads.
  peer_process child_;
  caf::actor_system_config cfg_;
  caf::actor_system sys_{with_middleman(cfg_)};

  caf::actor remote_peer() {
    auto a = sys_.middleman().remote_actor("127.0.0.1", child_.port());
    EXPECT_TRUE(a) << sys_.render(a.error());
    return a ? *a : caf::actor{};
  }
  // One question to `peer` from a scoped actor of its own, as the runtime asks.
  result<std::string> ask(const caf::actor& peer, const std::string& question,
                          const monitored_ask_options& opt) {
    caf::scoped_actor me{sys_};
    return ask_monitored<std::string>(me.ptr(), peer, caf::make_message(question), opt);
  }
  // One question from askers_ (after sys_: its kept actors end before the system does).
  monitored_askers askers_;
  result<std::string> ask_kept(const caf::actor& peer, const std::string& question,
                               const monitored_ask_options& opt) {
    return askers_.ask<std::string>(sys_, peer, caf::make_message(question), opt);
  }
};

TEST_F(monitored_ask_test, an_answer_comes_back_from_the_remote_peer) {
  ASSERT_NE(child_.port(), 0);
  auto peer = remote_peer();
  monitored_ask_options opt;
  opt.timeout = 30s;
  auto r = ask(peer, "ping", opt);
  ASSERT_TRUE(r) << r.err().to_string();
  EXPECT_EQ(*r, "pong");
}

TEST_F(monitored_ask_test, a_dropped_link_ends_the_wait_as_peer_dead_not_as_a_timeout) {
  ASSERT_NE(child_.port(), 0);
  auto peer = remote_peer();
  // The question waits (the peer never answers "hold") until the child dies 300 ms in. A plain
  // CAF request would wait out its whole 60 s timeout here.
  std::thread killer([this] {
    std::this_thread::sleep_for(300ms);
    child_.kill();
  });
  monitored_ask_options opt;
  opt.timeout = 60s;
  opt.what = "the test peer";
  auto r = ask(peer, "hold", opt);
  killer.join();
  ASSERT_FALSE(r);
  EXPECT_EQ(r.err().code, errc::peer_dead) << r.err().to_string();
  EXPECT_NE(r.err().message.find("the test peer: the link dropped"), std::string::npos)
      << r.err().message;
}

TEST_F(monitored_ask_test, a_peer_that_is_already_gone_is_reported_at_once) {
  ASSERT_NE(child_.port(), 0);
  auto peer = remote_peer();
  child_.kill();
  monitored_ask_options opt;
  opt.timeout = 60s;
  auto r = ask(peer, "ping", opt);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.err().code, errc::peer_dead) << r.err().to_string();
}

TEST_F(monitored_ask_test, still_wanted_ends_the_wait_with_its_error) {
  ASSERT_NE(child_.port(), 0);
  auto peer = remote_peer();
  monitored_ask_options opt;
  opt.timeout = 60s;
  opt.poll = 20ms;
  int polls = 0;
  opt.still_wanted = [&]() -> status {
    if (++polls < 3) return {};
    return error{errc::shutting_down, "the caller gave up"};
  };
  auto r = ask(peer, "hold", opt);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.err().code, errc::shutting_down);
  EXPECT_EQ(polls, 3);
}

TEST_F(monitored_ask_test, silence_from_a_live_peer_is_a_timeout) {
  ASSERT_NE(child_.port(), 0);
  auto peer = remote_peer();
  monitored_ask_options opt;
  opt.timeout = 300ms;
  opt.poll = 50ms;
  auto r = ask(peer, "hold", opt);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.err().code, errc::timeout) << r.err().to_string();
}

// monitored_askers: the questions of a node to its coordinator, from kept actors.

TEST_F(monitored_ask_test, kept_askers_ask_again_from_the_same_actor) {
  ASSERT_NE(child_.port(), 0);
  auto peer = remote_peer();
  monitored_ask_options opt;
  opt.timeout = 30s;
  auto first = ask_kept(peer, "who", opt);
  auto second = ask_kept(peer, "who", opt);
  ASSERT_TRUE(first && second);
  // One actor, so one proxy on the peer's side instead of one made and killed per question.
  EXPECT_EQ(*first, *second);
}

TEST_F(monitored_ask_test, a_late_answer_never_reaches_the_next_question) {
  ASSERT_NE(child_.port(), 0);
  auto peer = remote_peer();
  monitored_ask_options opt;
  opt.timeout = 30s;
  auto before = ask_kept(peer, "who", opt);
  ASSERT_TRUE(before);
  // "late" times out here; its answer comes 300 ms later, to the actor that asked it.
  monitored_ask_options quick = opt;
  quick.timeout = 50ms;
  quick.poll = 10ms;
  auto late = ask_kept(peer, "late", quick);
  ASSERT_FALSE(late);
  EXPECT_EQ(late.err().code, errc::timeout);
  std::this_thread::sleep_for(600ms);  // the late answer has been sent meanwhile
  auto ping = ask_kept(peer, "ping", opt);
  ASSERT_TRUE(ping) << ping.err().to_string();
  EXPECT_EQ(*ping, "pong");  // a kept actor that had asked "late" would take "late answer"
  auto after = ask_kept(peer, "who", opt);
  ASSERT_TRUE(after);
  EXPECT_NE(*after, *before);  // the actor that went unanswered was dropped
}

TEST_F(monitored_ask_test, kept_askers_report_a_dropped_link_and_start_anew) {
  ASSERT_NE(child_.port(), 0);
  auto peer = remote_peer();
  monitored_ask_options opt;
  opt.timeout = 60s;
  ASSERT_TRUE(ask_kept(peer, "ping", opt));
  // The kept actor monitors the peer since its first question: its death ends the next wait.
  child_.kill();
  auto r = ask_kept(peer, "hold", opt);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.err().code, errc::peer_dead) << r.err().to_string();
  askers_.close();
  // Closed: still asks (from a fresh actor), and the dead peer is reported again.
  auto again = ask_kept(peer, "ping", opt);
  ASSERT_FALSE(again);
  EXPECT_EQ(again.err().code, errc::peer_dead);
}

}  // namespace
}  // namespace moerl::actors
