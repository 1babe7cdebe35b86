// The sample plane's transport: rollout/reward -> buffer shard -> trainer over ZeroMQ,
// carrying moerl_messages frames (Cap'n Proto), with credit-based flow control.
//
//   producer (DEALER) --sample--> shard (ROUTER) <--batch_request-- trainer (DEALER)
//            <--credit--                          --batch-->
//
// A message is [body]... (the shard's ROUTER sees [routing id][body]...): one or more
// moerl_messages frames, handled in order, so a producer sends a whole group as one message.
//
// Credit is demand-driven. A producer declares its backlog with
// credit{consumer=<its name>, credits=n}: "I intend to send n more samples" (n=0 is the
// hello at connect). The shard grants increments credit{consumer=<shard name>, credits=k}
// up to that demand, at most credits_per_producer outstanding per producer, rotating among
// producers, and never more in total than its free capacity: resident samples + samples in
// transit <= capacity, so a slow trainer slows producers and nothing grows without bound.
// Because a producer is only granted what it asked for, an idle producer holds no credit
// that others need. The shard learns the demand exactly: a declaration arrives after every
// sample sent before it (one connection is FIFO), so demand = received + n.
//
// Threading: every object here is NON-BLOCKING and owned by ONE thread (ZeroMQ sockets
// are not thread-safe). Call poll(timeout_ms) from the owner's loop or from an actor's
// timer with timeout 0; nothing spawns a thread. A zmq_context may be shared by objects
// owned by different threads.
// Errors: every libzmq call is checked by ZMQ_CHECK (call, file, line in the message);
// bytes from peers are decoded as untrusted input and a bad frame is counted, dropped and
// logged (rate-limited: one line per reason per second, with the count since the last).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/config.h"
#include "common/error.h"
#include "common/rate_limited_log.h"
#include "ledger/buffer_shard.h"
#include "messages/sample.h"
#include "zmq/context.h"

namespace moerl::ledger {

// Rollout or reward side: sends samples to one shard, one per credit. Sockets close with
// linger 0, so destroying a producer discards samples still queued locally: keep it until
// the unit's report is acknowledged (an unsent sample only means the unit cannot commit and
// its lease expires; it is never miscounted).
class sample_producer {
 public:
  // Connects to `endpoint` ("tcp://127.0.0.1:port" or "ipc:///path") and says hello.
  static result<std::unique_ptr<sample_producer>> connect(std::shared_ptr<zmq::zmq_context> ctx,
                                                          const std::string& endpoint,
                                                          const std::string& name);
  ~sample_producer();

  // Tells the shard how many samples this producer still intends to send (e.g. a lease's
  // num_samples() when it starts a unit). Credit is granted up to it.
  status declare_backlog(uint32_t num_samples);
  // Sends when a credit is available; errc::capacity_exceeded otherwise (poll and retry).
  // Out of credit with no declaration pending, it declares a backlog of 1 itself, so a
  // caller that never declares still progresses, one round trip per sample.
  status try_send(const messages::sample& s);
  // Sends samples[from..] as far as the credit goes (at most kMaxSamplesPerMessage) in ONE
  // multipart message, and says how many went; errc::capacity_exceeded when none could (out
  // of credit, it declares the rest as its backlog unless a declaration is pending). One
  // message per group instead of per sample: each message wakes the shard's loop and both
  // sides' ZeroMQ I/O threads.
  result<size_t> try_send_some(const std::vector<messages::sample>& samples, size_t from = 0);
  // Reads credit grants; waits up to timeout_ms for the first one (0: don't wait).
  status poll(int timeout_ms);
  uint32_t credits() const { return credits_; }
  uint64_t num_sent() const { return sent_; }
  uint64_t num_bad_frames() const { return bad_frames_; }

 private:
  sample_producer() = default;
  std::shared_ptr<zmq::zmq_context> ctx_;
  void* sock_ = nullptr;
  std::string name_;
  uint32_t credits_ = 0;
  bool asked_ = false;  // a declaration is waiting for its grant
  uint64_t sent_ = 0;
  uint64_t bad_frames_ = 0;
  bool serving_ = true;
  std::unique_ptr<rate_limited_log> drops_;
};

// Trainer side: asks a shard for batches of whole groups. `name` is the consumer's identity
// (the trainer node's name, or a trainer group's) and its routing id; `incarnation` says
// which trainer state asks (LEDGER.md, "Handed to a trainer"): 0 never confirms, so the
// shard counts each group trained as it is served; any other value keeps the groups handed
// until confirm(), and a higher one than the shard has seen makes it serve the groups handed
// to the lower ones again.
class batch_consumer {
 public:
  static result<std::unique_ptr<batch_consumer>> connect(std::shared_ptr<zmq::zmq_context> ctx,
                                                         const std::string& endpoint,
                                                         const std::string& name,
                                                         uint64_t incarnation = 0);
  ~batch_consumer();

  // Asks for up to num_groups groups; the shard answers when at least one is ready.
  status request(uint32_t num_groups);
  // Tells the shard the step made a policy version with these batches (their groups are
  // trained). Needs an incarnation other than 0.
  status confirm(const std::vector<uint64_t>& batch_ids);
  // A batch if one arrived within timeout_ms (0: don't wait); nullopt otherwise.
  result<std::optional<messages::batch>> poll(int timeout_ms);
  // Waits up to timeout_ms until any of `consumers` has something to read (true), so that a
  // trainer waiting on several shards takes a batch from whichever answers first instead of
  // waiting on each in turn. No consumers: sleeps timeout_ms.
  static result<bool> wait_any(const std::vector<batch_consumer*>& consumers, int timeout_ms);
  uint64_t num_bad_frames() const { return bad_frames_; }

 private:
  batch_consumer() = default;
  std::shared_ptr<zmq::zmq_context> ctx_;
  void* sock_ = nullptr;
  std::string name_;
  uint64_t incarnation_ = 0;
  uint64_t bad_frames_ = 0;
  bool serving_ = true;
  std::unique_ptr<rate_limited_log> drops_;
};

// The most samples one sample-plane message carries (a shard drops a message with more
// bodies as a whole); a prompt group is usually 8-64.
constexpr size_t kMaxSamplesPerMessage = 256;

struct sample_plane_options {
  uint32_t credits_per_producer = 64;  // buffer.credits_per_producer: max outstanding per producer
  size_t max_frame_bytes = 16u << 20;  // buffer.max_frame_bytes: larger frames are dropped
  static result<sample_plane_options> from_config(const config& cfg);
};

// Shard side: a ROUTER socket in front of a buffer_shard. pump() moves everything that
// arrived into the shard, grants credits from free capacity, and answers waiting batch
// requests. The owner forwards take_acks()/take_consumed() to the ledger and applies
// ledger events with shard().apply().
class shard_service {
 public:
  // Binds `endpoint`; "tcp://127.0.0.1:*" picks a free port (see endpoint()).
  static result<std::unique_ptr<shard_service>> bind(std::shared_ptr<zmq::zmq_context> ctx,
                                                     const std::string& endpoint,
                                                     shard_options shard,
                                                     sample_plane_options plane = {});
  ~shard_service();

  // Handles what arrives within timeout_ms (0: only what is already there), then grants
  // credits and serves waiting trainers. Returns the number of frames handled.
  result<size_t> pump(int timeout_ms);

  buffer_shard& shard() { return *shard_; }
  const buffer_shard& shard() const { return *shard_; }
  std::vector<shard_ack> take_acks() { return shard_->take_acks(); }
  std::vector<consumption> take_consumed();
  const std::string& endpoint() const { return endpoint_; }  // resolved, connectable

  // Off: trainers' requests wait unanswered and producers get no new credit (requests and
  // confirmations are still taken in). The buffer node turns it off while it cannot be sure
  // the coordinator still counts it alive (actors/coordinator_trust.h): a shard declared
  // lost has its groups re-opened, and must not hand them out as well.
  void set_serving(bool on) { serving_ = on; }
  bool serving() const { return serving_; }

  uint64_t credits_outstanding() const;  // granted and not yet used, all producers
  uint64_t num_bad_frames() const { return bad_frames_; }
  // Releases the credit reserved for a producer that is gone (its worker was declared
  // dead); `name` is the producer's name (its routing id). Unknown names are ignored.
  void forget_producer(const std::string& name);

 private:
  shard_service() = default;
  status grant_credits();
  status serve_waiting();
  // One body of a message from `peer` (a sample, a credit declaration or a batch request);
  // `from` names the peer in the log line of a body that is dropped.
  void handle_body(const std::string& peer, const std::string& body,
                   const std::function<std::string()>& from);

  std::shared_ptr<zmq::zmq_context> ctx_;
  void* sock_ = nullptr;
  std::string endpoint_;
  sample_plane_options plane_;
  std::unique_ptr<buffer_shard> shard_;
  struct producer_state {
    uint64_t received = 0;  // samples received from it, ever
    uint64_t granted = 0;   // credits granted to it, ever
    uint64_t demand = 0;    // received + its last declared backlog
  };
  std::map<std::string, producer_state> producers_;  // by routing id
  std::string next_grant_;                           // rotation: grants start at this producer
  struct waiting_request {
    uint32_t num_groups = 0;
    consumer_ref from;
  };
  std::map<std::string, waiting_request> waiting_;  // trainer routing id -> what it asked for
  std::vector<consumption> consumed_;
  uint64_t bad_frames_ = 0;
  bool serving_ = true;
  std::unique_ptr<rate_limited_log> drops_;    // frames dropped (garbage), by reason
  std::unique_ptr<rate_limited_log> refused_;  // samples admission refused, by errc
};

}  // namespace moerl::ledger
