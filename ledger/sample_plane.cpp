// ZeroMQ through its C API: cppzmq reports failures by throwing, and moerl's convention
// is errors as values checked by one macro per domain (ZMQ_CHECK). RAII is kept small:
// each owner closes its socket in its destructor with linger 0, so a dead peer never
// blocks shutdown.
#include "ledger/sample_plane.h"

#include <zmq.h>

#include <algorithm>

#include "common/config_text.h"
#include "common/log.h"
#include "common/status_try.h"
#include "messages/codec.h"
#include "zmq/check.h"

namespace moerl::ledger {

namespace {

constexpr size_t kMaxRoutingId = 255;  // ZMQ_ROUTING_ID limit

void close_socket(void*& sock) {
  if (!sock) return;
  int zero = 0;
  zmq_setsockopt(sock, ZMQ_LINGER, &zero, sizeof zero);  // best effort on teardown
  zmq_close(sock);
  sock = nullptr;
}

// A socket with linger 0, routing id `name` (dealers), a frame size cap and CURVE when the
// cluster has plane keys (the shard's ROUTER serves, producers' and consumers' DEALERs connect).
result<void*> open_socket(const zmq::zmq_context& ctx, int type, const std::string& name,
                          int64_t max_frame) {
  void* sock = zmq_socket(ctx.handle(), type);
  if (!sock)
    return zmq::detail::zmq_failure("zmq_socket(ctx, type)", zmq_errno(), __FILE__, __LINE__);
  auto setup = [&]() -> status {
    int zero = 0;
    ZMQ_CHECK(zmq_setsockopt(sock, ZMQ_LINGER, &zero, sizeof zero));
    ZMQ_CHECK(zmq_setsockopt(sock, ZMQ_MAXMSGSIZE, &max_frame, sizeof max_frame));
    // Credits bound what is in flight; ZeroMQ's own high-water marks would only add a
    // second, lagging limit (pipes acknowledge reads in batches of HWM/2) that can refuse
    // a send the credit allowed.
    ZMQ_CHECK(zmq_setsockopt(sock, ZMQ_SNDHWM, &zero, sizeof zero));
    ZMQ_CHECK(zmq_setsockopt(sock, ZMQ_RCVHWM, &zero, sizeof zero));
    if (type == ZMQ_DEALER && !name.empty())
      ZMQ_CHECK(zmq_setsockopt(sock, ZMQ_ROUTING_ID, name.data(), name.size()));
    if (type == ZMQ_ROUTER) {
      int one = 1;
      // A reply to a peer that went away fails (EHOSTUNREACH) instead of vanishing.
      ZMQ_CHECK(zmq_setsockopt(sock, ZMQ_ROUTER_MANDATORY, &one, sizeof one));
    }
    return type == ZMQ_ROUTER ? ctx.secure_server(sock) : ctx.secure_client(sock);
  };
  auto s = setup();
  if (!s) {
    close_socket(sock);
    return s.err();
  }
  return sock;
}

status send_frame(void* sock, const std::string& bytes, int flags) {
  ZMQ_CHECK(zmq_send(sock, bytes.data(), bytes.size(), flags | ZMQ_DONTWAIT));
  return ok_status();
}

// Waits up to timeout_ms until any of `socks` is readable. true when one is (an interrupted
// wait counts as nothing readable). No sockets: sleeps timeout_ms.
result<bool> wait_readable(const std::vector<void*>& socks, int timeout_ms) {
  std::vector<zmq_pollitem_t> items;
  items.reserve(socks.size());
  for (void* sock : socks) items.push_back({sock, 0, ZMQ_POLLIN, 0});
  const int n = zmq_poll(items.data(), static_cast<int>(items.size()), timeout_ms);
  if (n == -1) {
    if (zmq_errno() == EINTR) return false;
    return zmq::detail::zmq_failure("zmq_poll(POLLIN)", zmq_errno(), __FILE__, __LINE__);
  }
  return n > 0;
}

result<bool> wait_readable(void* sock, int timeout_ms) {
  return wait_readable(std::vector<void*>{sock}, timeout_ms);
}

// Receives one whole multipart message without blocking: its frames, or an empty vector
// when nothing is waiting.
result<std::vector<std::string>> recv_message(void* sock) {
  std::vector<std::string> frames;
  while (true) {
    zmq_msg_t msg;
    zmq_msg_init(&msg);
    int rc = zmq_msg_recv(&msg, sock, ZMQ_DONTWAIT);
    if (rc == -1) {
      int e = zmq_errno();
      zmq_msg_close(&msg);
      if (e == EAGAIN && frames.empty()) return frames;
      return zmq::detail::zmq_failure("zmq_msg_recv(&msg, sock, ZMQ_DONTWAIT)", e, __FILE__,
                                      __LINE__);
    }
    frames.emplace_back(static_cast<const char*>(zmq_msg_data(&msg)), zmq_msg_size(&msg));
    bool more = zmq_msg_more(&msg);
    zmq_msg_close(&msg);
    if (!more) return frames;
  }
}

// The rate-limited log of what `what` drops ("shard buffer-0: dropped a frame").
std::unique_ptr<rate_limited_log> drop_log(const std::string& what, spdlog::level::level_enum lvl) {
  return std::make_unique<rate_limited_log>(
      what, [lvl](const std::string& line) { logger("sample_plane")->log(lvl, "{}", line); });
}

status check_name(const std::string& name, const char* what) {
  if (name.empty() || name.size() > kMaxRoutingId)
    return error(errc::invalid_argument, std::string(what) + " name must be 1..255 bytes");
  return ok_status();
}

}  // namespace

result<sample_plane_options> sample_plane_options::from_config(const config& cfg) {
  sample_plane_options o;
  int64_t credits = cfg.get_int("buffer.credits_per_producer");
  int64_t frame = cfg.get_int("buffer.max_frame_bytes");
  if (credits <= 0 || credits > (1 << 20))
    return error(errc::invalid_config, "buffer.credits_per_producer must be in [1, 1048576]");
  if (frame < 1024) return error(errc::invalid_config, "buffer.max_frame_bytes must be >= 1024");
  o.credits_per_producer = uint32_t(credits);
  o.max_frame_bytes = size_t(frame);
  return o;
}

// ---- producer -------------------------------------------------------------------------

result<std::unique_ptr<sample_producer>> sample_producer::connect(
    std::shared_ptr<zmq::zmq_context> ctx, const std::string& endpoint, const std::string& name) {
  if (auto s = check_name(name, "producer"); !s) return s.err();
  std::unique_ptr<sample_producer> p(new sample_producer());
  p->ctx_ = std::move(ctx);
  p->name_ = name;
  p->drops_ = drop_log("producer " + name + ": dropped a frame", spdlog::level::warn);
  ASSIGN_OR_RETURN(auto sock, open_socket(*p->ctx_, ZMQ_DEALER, name, 1 << 20));
  p->sock_ = sock;
  auto connect = [&]() -> status {
    ZMQ_CHECK(zmq_connect(p->sock_, endpoint.c_str()));
    return ok_status();
  };
  if (auto s = connect(); !s) return error(s.err().code, endpoint + ": " + s.err().message);
  // Hello: a backlog of 0 registers this routing id with the shard.
  if (auto s = p->declare_backlog(0); !s) return s.err();
  return p;
}

sample_producer::~sample_producer() { close_socket(sock_); }

status sample_producer::declare_backlog(uint32_t num_samples) {
  messages::credit demand;
  demand.consumer = name_;
  demand.credits = num_samples;
  auto s = send_frame(sock_, messages::encode(demand), 0);
  if (s && num_samples > 0) asked_ = true;
  return s;
}

status sample_producer::try_send(const messages::sample& s) {
  if (credits_ == 0) {
    if (!asked_) {
      if (auto d = declare_backlog(1); !d) return d;
    }
    return error(errc::capacity_exceeded, "producer " + name_ + ": no credit from the shard");
  }
  auto st = send_frame(sock_, messages::encode(s), 0);
  if (!st) return st;
  --credits_;
  ++sent_;
  return ok_status();
}

result<size_t> sample_producer::try_send_some(const std::vector<messages::sample>& samples,
                                              size_t from) {
  if (from >= samples.size()) return size_t{0};
  const size_t left = samples.size() - from;
  if (credits_ == 0) {
    if (!asked_) {
      if (auto d = declare_backlog(static_cast<uint32_t>(std::min<size_t>(left, UINT32_MAX))); !d)
        return d.err();
    }
    return error(errc::capacity_exceeded, "producer " + name_ + ": no credit from the shard");
  }
  const size_t n = std::min<size_t>({left, credits_, kMaxSamplesPerMessage});
  for (size_t i = 0; i < n; ++i)
    if (auto st =
            send_frame(sock_, messages::encode(samples[from + i]), i + 1 < n ? ZMQ_SNDMORE : 0);
        !st)
      return st.err();  // a multipart message is sent whole or not at all
  credits_ -= static_cast<uint32_t>(n);
  sent_ += n;
  return n;
}

status sample_producer::poll(int timeout_ms) {
  auto ready = wait_readable(sock_, timeout_ms);
  if (!ready) return ready.err();
  while (true) {
    ASSIGN_OR_RETURN(auto frames, recv_message(sock_));
    if (frames.empty()) return ok_status();
    auto c = messages::decode<messages::credit>(frames.back());
    if (!c) {
      ++bad_frames_;
      drops_->note("not a credit", c.err().to_string());
      continue;
    }
    credits_ += c->credits;
    if (c->credits > 0) asked_ = false;
  }
}

// ---- consumer -------------------------------------------------------------------------

result<std::unique_ptr<batch_consumer>> batch_consumer::connect(
    std::shared_ptr<zmq::zmq_context> ctx, const std::string& endpoint, const std::string& name,
    uint64_t incarnation) {
  if (auto s = check_name(name, "trainer"); !s) return s.err();
  std::unique_ptr<batch_consumer> c(new batch_consumer());
  c->ctx_ = std::move(ctx);
  c->name_ = name;
  c->incarnation_ = incarnation;
  c->drops_ = drop_log("trainer " + name + ": dropped a frame", spdlog::level::warn);
  // A routing id of its own per incarnation: a router ignores a peer that connects with the
  // routing id of a pipe it still has, so a trainer's next incarnation, connecting under the
  // name before the shard noticed the old socket close, would never be heard (the shard
  // names the consumer from the request, not from the routing id).
  const std::string routing_id = incarnation ? name + "@" + std::to_string(incarnation) : name;
  if (auto s = check_name(routing_id, "trainer"); !s)
    return error(s.err().code, s.err().message + " with its incarnation");
  ASSIGN_OR_RETURN(auto sock, open_socket(*c->ctx_, ZMQ_DEALER, routing_id, int64_t(1) << 30));
  c->sock_ = sock;
  auto connect = [&]() -> status {
    ZMQ_CHECK(zmq_connect(c->sock_, endpoint.c_str()));
    return ok_status();
  };
  if (auto s = connect(); !s) return error(s.err().code, endpoint + ": " + s.err().message);
  return c;
}

batch_consumer::~batch_consumer() { close_socket(sock_); }

status batch_consumer::request(uint32_t num_groups) {
  if (num_groups == 0) return error(errc::invalid_argument, "batch request for 0 groups");
  messages::batch_request r;
  r.trainer = name_;
  r.num_groups = num_groups;
  r.incarnation = incarnation_;
  return send_frame(sock_, messages::encode(r), 0);
}

status batch_consumer::confirm(const std::vector<uint64_t>& batch_ids) {
  if (incarnation_ == 0)
    return error(errc::invalid_argument, "trainer " + name_ + ": incarnation 0 never confirms");
  if (batch_ids.empty()) return ok_status();
  messages::batch_request r;
  r.trainer = name_;
  r.num_groups = 0;
  r.incarnation = incarnation_;
  r.confirmed_batches = batch_ids;
  return send_frame(sock_, messages::encode(r), 0);
}

result<std::optional<messages::batch>> batch_consumer::poll(int timeout_ms) {
  auto ready = wait_readable(sock_, timeout_ms);
  if (!ready) return ready.err();
  while (true) {
    ASSIGN_OR_RETURN(auto frames, recv_message(sock_));
    if (frames.empty()) return std::optional<messages::batch>{};
    auto b = messages::decode<messages::batch>(frames.back());
    if (!b) {
      ++bad_frames_;
      drops_->note("not a batch", b.err().to_string());
      continue;
    }
    return std::optional<messages::batch>(std::move(*b));
  }
}

result<bool> batch_consumer::wait_any(const std::vector<batch_consumer*>& consumers,
                                      int timeout_ms) {
  std::vector<void*> socks;
  socks.reserve(consumers.size());
  for (const batch_consumer* c : consumers) socks.push_back(c->sock_);
  return wait_readable(socks, timeout_ms);
}

// ---- shard service --------------------------------------------------------------------

result<std::unique_ptr<shard_service>> shard_service::bind(std::shared_ptr<zmq::zmq_context> ctx,
                                                           const std::string& endpoint,
                                                           shard_options shard,
                                                           sample_plane_options plane) {
  if (shard.capacity_samples == 0 || shard.group_size == 0)
    return error(errc::invalid_argument,
                 "shard " + shard.name + ": capacity and group size must be positive");
  std::unique_ptr<shard_service> s(new shard_service());
  s->ctx_ = std::move(ctx);
  s->plane_ = plane;
  s->drops_ = drop_log("shard " + shard.name + ": dropped a frame", spdlog::level::warn);
  // Refusals are routine (a fenced attempt's late samples): info, not warn.
  s->refused_ = drop_log("shard " + shard.name + ": refused a sample", spdlog::level::info);
  s->shard_ = std::make_unique<buffer_shard>(std::move(shard));
  ASSIGN_OR_RETURN(auto sock,
                   open_socket(*s->ctx_, ZMQ_ROUTER, "", int64_t(plane.max_frame_bytes)));
  s->sock_ = sock;
  auto bind = [&]() -> status {
    ZMQ_CHECK(zmq_bind(s->sock_, endpoint.c_str()));
    char buf[512];
    size_t len = sizeof buf;
    ZMQ_CHECK(zmq_getsockopt(s->sock_, ZMQ_LAST_ENDPOINT, buf, &len));
    s->endpoint_.assign(buf, strnlen(buf, len));
    return ok_status();
  };
  if (auto st = bind(); !st) return error(st.err().code, endpoint + ": " + st.err().message);
  return s;
}

shard_service::~shard_service() { close_socket(sock_); }

uint64_t shard_service::credits_outstanding() const {
  uint64_t n = 0;
  for (const auto& [id, p] : producers_) n += p.granted > p.received ? p.granted - p.received : 0;
  return n;
}

void shard_service::forget_producer(const std::string& name) { producers_.erase(name); }

std::vector<consumption> shard_service::take_consumed() {
  std::vector<consumption> out;
  out.swap(consumed_);
  return out;
}

result<size_t> shard_service::pump(int timeout_ms) {
  size_t handled = 0;
  ASSIGN_OR_RETURN(auto ready, wait_readable(sock_, timeout_ms));
  while (ready) {
    ASSIGN_OR_RETURN(auto frames, recv_message(sock_));
    if (frames.empty()) break;
    ++handled;
    // Peers name themselves with their routing id; one that did not has a binary one.
    auto from = [&] { return " from " + printable_excerpt(frames[0]); };
    if (frames.size() < 2 || frames.size() - 1 > kMaxSamplesPerMessage) {
      ++bad_frames_;  // counted and its reason logged (rate-limited), as every unused frame
      drops_->note("a message of " + std::to_string(frames.size() - 1) + " bodies",
                   "1.." + std::to_string(kMaxSamplesPerMessage) + " are taken" + from());
      continue;
    }
    const std::string& peer = frames[0];
    for (size_t f = 1; f < frames.size(); ++f) handle_body(peer, frames[f], from);
  }
  if (!serving_) return handled;
  if (auto s = serve_waiting(); !s) return s.err();
  if (auto s = grant_credits(); !s) return s.err();
  return handled;
}

void shard_service::handle_body(const std::string& peer, const std::string& body,
                                const std::function<std::string()>& from) {
  // Every frame that is not used is counted and its reason logged (rate-limited).
  auto drop = [&](const std::string& reason, const std::string& detail) {
    ++bad_frames_;
    drops_->note(reason, detail);
  };
  auto k = messages::peek_kind(body.data(), body.size());
  if (!k) {
    drop("not a moerl message", k.err().message + from());
    return;
  }
  if (*k == messages::kind::sample) {
    auto smp = messages::decode<messages::sample>(body);
    auto it = producers_.find(peer);
    if (it != producers_.end()) ++it->second.received;
    if (!smp) {
      drop("an undecodable sample", smp.err().message + from());
      return;
    }
    // Refusals are counted in the shard's stats; the credit is spent either way and is
    // granted again below, since a refused sample takes no room.
    if (auto admitted = shard_->admit(std::move(*smp)); !admitted)
      refused_->note(errc_name(admitted.err().code), admitted.err().message + from());
  } else if (*k == messages::kind::credit) {
    auto demand = messages::decode<messages::credit>(body);
    if (!demand) {
      drop("an undecodable credit", demand.err().message + from());
      return;
    }
    // Every sample the producer sent before this declaration has been received (FIFO).
    auto& p = producers_[peer];
    p.demand = p.received + demand->credits;
  } else if (*k == messages::kind::batch_request) {
    auto req = messages::decode<messages::batch_request>(body);
    if (!req || (req->num_groups == 0 && req->confirmed_batches.empty())) {
      drop("a bad batch request", (req ? "0 groups" : req.err().message) + from());
      return;
    }
    const consumer_ref who{req->trainer.empty() ? peer : req->trainer, req->incarnation};
    // A newer incarnation first releases what the older ones held (served again below);
    // a lost one is fenced: it gets nothing and its confirmations count for nothing.
    auto released = shard_->consumer_seen(who);
    if (!released) {
      refused_->note("fenced trainer", released.err().message + from());
      return;
    }
    for (auto& c : *released) consumed_.push_back(c);
    for (uint64_t id : req->confirmed_batches) {
      auto trained = shard_->confirm(who, id);
      if (!trained) {
        refused_->note("fenced confirmation", trained.err().message + from());
        continue;
      }
      for (auto& c : *trained) consumed_.push_back(c);
    }
    if (req->num_groups > 0) waiting_[peer] = {req->num_groups, who};
  } else {
    drop("a message the shard does not take",
         "kind " + std::to_string(static_cast<int>(*k)) + from());
  }
}

status shard_service::serve_waiting() {
  for (auto it = waiting_.begin(); it != waiting_.end();) {
    if (shard_->num_ready_groups() == 0) break;
    served_batch sb = shard_->serve(it->second.num_groups, it->second.from);
    auto sent = send_frame(sock_, it->first, ZMQ_SNDMORE);
    if (sent) sent = send_frame(sock_, messages::encode(sb.batch), 0);
    // The ledger hears of the hand-out either way (a consumer that never confirms has the
    // groups counted as trained). A send that failed delivered nothing (the router refuses
    // a peer it is not connected to: a trainer that dropped this shard while it was not
    // serving): the batch is taken back and served again, so that it is not left handed to
    // a trainer that never got it (and would never confirm or release it).
    for (auto& c : sb.consumed) consumed_.push_back(c);
    if (!sent) {
      logger("sample_plane")
          ->warn("shard {}: batch {} to a trainer failed, taken back: {}", shard_->options().name,
                 sb.batch.batch_id, sent.err().to_string());
      for (auto& c : shard_->undelivered(sb.batch.batch_id)) consumed_.push_back(c);
    }
    it = waiting_.erase(it);
  }
  return ok_status();
}

status shard_service::grant_credits() {
  uint64_t out = credits_outstanding();
  uint64_t free = shard_->free_samples();
  uint64_t budget = free > out ? free - out : 0;
  if (budget == 0 || producers_.empty()) return ok_status();
  // Start after the producer served first last time, so that none is starved.
  auto start = producers_.upper_bound(next_grant_);
  for (size_t i = 0; i < producers_.size() && budget > 0; ++i, ++start) {
    if (start == producers_.end()) start = producers_.begin();
    const std::string& peer = start->first;
    producer_state& p = start->second;
    uint64_t held = p.granted > p.received ? p.granted - p.received : 0;
    uint64_t target = std::min<uint64_t>(p.demand, p.received + plane_.credits_per_producer);
    uint64_t granted_to = p.received + held;
    if (target <= granted_to) continue;
    uint64_t give = std::min<uint64_t>(target - granted_to, budget);
    messages::credit c;
    c.consumer = shard_->options().name;
    c.credits = uint32_t(give);
    auto s = send_frame(sock_, peer, ZMQ_SNDMORE);
    if (s) s = send_frame(sock_, messages::encode(c), 0);
    if (!s) continue;  // peer gone (EHOSTUNREACH); its credit is not counted
    p.granted = granted_to + give;
    budget -= give;
    next_grant_ = peer;
  }
  return ok_status();
}

}  // namespace moerl::ledger
