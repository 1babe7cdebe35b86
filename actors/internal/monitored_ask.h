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
#include <string>
#include <utility>

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

// Sends `question` to `peer` from `me` and waits for an answer of type T. errc::peer_dead
// when the peer went down or answered with a CAF error, errc::timeout when nothing came in
// time, or what `still_wanted` returned.
template <class T>
result<T> ask_monitored(caf::blocking_actor* me, const caf::actor& peer, caf::message question,
                        const monitored_ask_options& opt) {
  me->monitor(peer);
  me->send(peer, std::move(question));
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

}  // namespace moerl::actors
