// node.max_frame_bytes: the largest message any ZeroMQ server socket of this process takes
// (ZMQ_MAXMSGSIZE, applied by zmq_context::secure_server, which every server socket passes
// through before it binds). libzmq drops a peer that announces a larger message before it
// buffers it, so a stray or hostile sender cannot make a node allocate at will. The limit is
// on the frame as it crosses the wire (CURVE's box adds ~40 bytes). One per process: a node's
// planes share one config; make_plane_context (zmq/plane_context.h) sets it. 0: no limit.
#pragma once

#include <cstdint>

namespace moerl::zmq {

void set_max_frame_bytes(int64_t bytes);
int64_t max_frame_bytes();

}  // namespace moerl::zmq
