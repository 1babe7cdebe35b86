// One question to a (usually remote) actor that ends as soon as the answer cannot come.
//
// CAF 0.17 does not fail a pending request when the link to a remote actor drops: the request
// waits out its whole timeout for an answer that cannot come. At load a link made to re-join
// can drop at once (the coordinator's middleman, starved, times out the old link after the node
// reconnected and takes the node's new proxies with it), and a caller that waited
// node.request_timeout_ms (5 s) there outlived the coordinator's re-join grace (2 s): the node
// was declared dead while it was re-joining. So the question is sent, not requested, from a
// blocking actor that monitors the peer: the peer's down_msg (the link dropped, the actor
// ended) ends the wait at once. A handler's result for an ordinary message goes back to its
// sender as an ordinary message, so the answer arrives in the same mailbox.
//
// `me` must be the caller's own scoped actor for this one question (a fresh caf::scoped_actor):
// then no answer of an earlier, timed-out question can reach it and be taken for this one.
#pragma once

#ifndef MOERL_INSIDE_moerl_actors
#error \
    "actors/internal/monitored_ask.h is private to moerl_actors (actors/): include its public headers"
#endif

#include <caf/all.hpp>
#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "common/error.h"

namespace moerl::actors {

struct monitored_ask_options {
  std::chrono::milliseconds timeout{5000};
  // Named in every error ("the coordinator", "group g all-gather on c").
  std::string what = "the peer";
  // Checked every `poll` while waiting: an error ends the wait with it (a group that broke,
  // a coordinator replaced under the caller, a drain deadline).
  std::function<status()> still_wanted;
  std::chrono::milliseconds poll{100};
};

// Waits in `me`'s mailbox for the answer to the question it sent to a peer it monitors (see
// ask_monitored).
template <class T>
result<T> await_monitored_answer(caf::blocking_actor* me, const monitored_ask_options& opt) {
  const auto deadline = std::chrono::steady_clock::now() + opt.timeout;
  result<T> out = error{errc::timeout,
                        opt.what + ": no answer in " + std::to_string(opt.timeout.count()) + " ms"};
  for (bool waiting = true; waiting;) {
    me->receive(
        [&](T& answer) {
          out = std::move(answer);
          waiting = false;
        },
        // caf::to_string, not system().render: the caller may run on a thread that outlives
        // the actor system (a job's rank thread at shutdown), and render reads the system.
        [&](caf::error& e) {
          out = error{errc::peer_dead, opt.what + ": " + caf::to_string(e)};
          waiting = false;
        },
        [&](caf::down_msg& d) {
          out = error{errc::peer_dead,
                      opt.what + ": the link dropped (" + caf::to_string(d.reason) + ")"};
          waiting = false;
        },
        caf::after(opt.poll) >>
            [&] {
              if (opt.still_wanted) {
                if (auto st = opt.still_wanted(); !st) {
                  out = st.err();
                  waiting = false;
                  return;
                }
              }
              if (std::chrono::steady_clock::now() >= deadline) waiting = false;  // `out`: timeout
            });
  }
  return out;
}

// Sends `question` to `peer` from `me` and waits for an answer of type T. errc::peer_dead
// when the peer went down or answered with a CAF error, errc::timeout when nothing came in
// time, or what `still_wanted` returned.
template <class T>
result<T> ask_monitored(caf::blocking_actor* me, const caf::actor& peer, caf::message question,
                        const monitored_ask_options& opt) {
  me->monitor(peer);
  me->send(peer, std::move(question));
  return await_monitored_answer<T>(me, opt);
}

// ask_monitored's questions to one peer (a node's to its coordinator), from scoped actors
// kept for the next question instead of a fresh one each time (issue 27). Every fresh actor
// cost the peer's process a proxy made and announced back, then a down message and a proxy
// killed under CAF's proxy lock when it ended: ~43 per iteration of the default `moerl up`,
// the coordinator's largest CAF cost (proxy_registry::erase alone ~6% of its samples).
// An actor is kept only after its question was answered with a T: the peer answers each
// question once, so nothing of an earlier question can reach it later. After a timeout, a
// refusal by `still_wanted`, an error or a down message it is dropped (a late answer then
// reaches a dead actor, as before). A kept actor monitors the peer from its first question
// on; when the peer changes (a restarted coordinator) the kept ones go, so no down message of
// an old peer is taken for the new one's. Any thread may ask; concurrent questions use one
// actor each.
class monitored_askers {
 public:
  template <class T>
  result<T> ask(caf::actor_system& sys, const caf::actor& peer, caf::message question,
                const monitored_ask_options& opt) {
    auto me = take(sys, peer);
    (*me)->send(peer, std::move(question));
    auto out = await_monitored_answer<T>(me->ptr(), opt);
    if (out) keep(std::move(me), peer);
    return out;
  }

  // Drops the kept actors; later questions ask from fresh ones, dropped after each. Called
  // before the actor system goes (a scoped actor must end while its system runs).
  void close() {
    std::vector<std::unique_ptr<caf::scoped_actor>> gone;
    std::lock_guard<std::mutex> g(mu_);
    closed_ = true;
    gone.swap(idle_);
  }

 private:
  std::unique_ptr<caf::scoped_actor> take(caf::actor_system& sys, const caf::actor& peer) {
    std::vector<std::unique_ptr<caf::scoped_actor>> gone;  // ended outside the lock
    {
      std::lock_guard<std::mutex> g(mu_);
      if (peer_ != peer.address()) {
        gone.swap(idle_);
        peer_ = peer.address();
      }
      if (!idle_.empty()) {
        auto me = std::move(idle_.back());
        idle_.pop_back();
        return me;
      }
    }
    auto me = std::make_unique<caf::scoped_actor>(sys);
    (*me)->monitor(peer);
    return me;
  }

  void keep(std::unique_ptr<caf::scoped_actor> me, const caf::actor& peer) {
    std::lock_guard<std::mutex> g(mu_);
    if (!closed_ && peer_ == peer.address()) idle_.push_back(std::move(me));
    // otherwise `me` ends here (closed, or the peer changed meanwhile)
  }

  std::mutex mu_;
  bool closed_ = false;
  caf::actor_addr peer_;
  std::vector<std::unique_ptr<caf::scoped_actor>> idle_;
};

}  // namespace moerl::actors
