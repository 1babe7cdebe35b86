#include "bench/control/lease_client.h"

#include <chrono>
#include <memory>

#include <caf/all.hpp>

#include "actors/atoms.h"
#include "bench/support.h"
#include "messages/all.h"
#include "messages/work.h"

namespace moerl::bench {

using namespace moerl::actors;

std::string lease_request_bytes(const std::string& worker, uint32_t k) {
  messages::lease_request req;
  req.worker = worker;
  req.max_units = k;
  return messages::encode(req);
}

lease_grant decode_grant(const std::string& reply, uint32_t k) {
  lease_grant g;
  auto kind = messages::peek_kind(reply.data(), reply.size());
  if (k > 1 && kind && *kind == messages::kind::lease_batch) {
    auto b = messages::decode<messages::lease_batch>(reply);
    if (!b) {
      g.refusal = b.err().to_string();
      return g;
    }
    for (const auto& l : b->leases) g.leases.emplace_back(l.unit.id, l.attempt);
    return g;
  }
  if (k == 1) {
    auto l = messages::decode<messages::lease>(reply);
    if (l) {
      g.leases.emplace_back(l->unit.id, l->attempt);
      return g;
    }
  }
  auto e = messages::decode<messages::wire_error>(reply);
  g.refusal = e ? e->value.to_string() : "undecodable reply";
  return g;
}

namespace {

// The hand-back message of a grant: the K=1 path's unit_report{returned}, or one give-back
// of every lease of a batch.
caf::message hand_back(const std::string& worker, uint32_t k, const lease_grant& g) {
  if (k == 1) {
    messages::unit_report rep;
    rep.unit_id = g.leases[0].first;
    rep.attempt = g.leases[0].second;
    rep.worker = worker;
    rep.status = messages::unit_status::returned;
    return caf::make_message(report_atom::value, messages::encode(rep));
  }
  messages::lease_give_back back{worker, {}};
  for (const auto& [unit, attempt] : g.leases) back.leases.push_back({unit, attempt});
  return caf::make_message(giveback_atom::value, messages::encode(back));
}

caf::message lease_message(const std::string& request, uint32_t k) {
  return k == 1 ? caf::make_message(lease_atom::value, request)
                : caf::make_message(leases_atom::value, request);
}

}  // namespace

std::vector<double> timed_lease_round_trips(caf::scoped_actor& self, const caf::actor& coord,
                                            const std::string& worker, uint32_t k, int n,
                                            uint64_t& units, std::string& first_refusal) {
  std::vector<double> us;
  const auto request = lease_message(lease_request_bytes(worker, k), k);
  int timeouts = 0;
  for (int i = 0; i < n && timeouts < 3; ++i) {
    std::string reply;
    auto t0 = bench_clock::now();
    double elapsed_us = 0;
    self->request(coord, std::chrono::seconds(2), request)
        .receive([&](std::string& r) { reply = std::move(r); },
                 [&](caf::error& e) {
                   ++timeouts;
                   if (first_refusal.empty()) first_refusal = self->system().render(e);
                 });
    elapsed_us = us_since(t0);
    auto g = decode_grant(reply, k);
    if (g.leases.empty()) {  // refused (or no reply: 3 of those end the run)
      if (first_refusal.empty()) first_refusal = g.refusal;
      continue;
    }
    us.push_back(elapsed_us);
    units += g.leases.size();
    self->request(coord, std::chrono::seconds(5), hand_back(worker, k, g))
        .receive([](std::string&) {}, [](caf::error&) {});
  }
  return us;
}

caf::actor spawn_lease_driver(caf::actor_system& sys, const caf::actor& coord,
                              const std::string& worker, uint32_t k, int window, int64_t until_ns,
                              std::function<void(uint64_t units)> granted) {
  return sys.spawn([=](caf::event_based_actor* s) -> caf::behavior {
    const auto request = lease_message(lease_request_bytes(worker, k), k);
    // One lease cycle: request, count the grant, hand it back, start the next. Each of the
    // `window` chains keeps exactly one request in flight.
    auto next = std::make_shared<std::function<void()>>();
    *next = [=] {
      if (bench_clock::now().time_since_epoch().count() >= until_ns) return;
      s->request(coord, std::chrono::seconds(5), request)
          .then(
              [=](const std::string& reply) {
                auto g = decode_grant(reply, k);
                if (g.leases.empty()) return (*next)();
                granted(g.leases.size());
                s->request(coord, std::chrono::seconds(5), hand_back(worker, k, g))
                    .then([=](const std::string&) { (*next)(); }, [=](caf::error&) { (*next)(); });
              },
              [=](caf::error&) { (*next)(); });
    };
    for (int w = 0; w < window; ++w) (*next)();
    return {[](shutdown_atom) {}};
  });
}

}  // namespace moerl::bench
