// `moerl console top`: the job's status and nodes table, live. On a terminal the screen is
// redrawn every interval and q or Ctrl-C quits; otherwise (a pipe) a snapshot is printed every
// interval. Either way it ends by itself once the job is done (after a last snapshot), and
// gives up when the coordinator has not answered for a while (a restarting coordinator is
// waited for).
#pragma once

#include <optional>
#include <string>

#include "zmq/plane_keys.h"

namespace moerl::apps {

struct top_options {
  std::string address;  // the coordinator's ZeroMQ console
  std::string token;    // console.token
  int timeout_ms = 5000;
  double interval_s = 0;                // between frames; <= 0: 1 s on a terminal, 5 s otherwise
  double give_up_s = 30;                // exit 3 after this long without an answer
  std::optional<zmq::plane_keys> keys;  // a console off loopback (zmq::admin_plane_keys)
};

// The exit code: 0 when the job is done or the user quit, 3 when the coordinator stopped
// answering.
int console_top(const top_options& o);

}  // namespace moerl::apps
