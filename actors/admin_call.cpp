#include "actors/internal/admin_call.h"

#include <caf/all.hpp>

#include "actors/atoms.h"

namespace moerl::actors {

namespace {

std::string ask_coordinator(caf::scoped_actor& self, const caf::actor& coordinator,
                            const std::string& request, uint64_t request_id, int timeout_ms) {
  std::string reply;
  self->request(coordinator, std::chrono::milliseconds(timeout_ms), admin_atom::value, request)
      .receive([&](std::string& r) { reply = std::move(r); },
               [&](caf::error& e) {
                 messages::admin_reply r;
                 r.request_id = request_id;
                 r.err = moerl::error(errc::timeout,
                                      "coordinator did not answer: " + self->system().render(e));
                 reply = messages::encode(r);
               });
  return reply;
}

}  // namespace

console::admin_caller_factory coordinator_admin_channel(caf::actor_system& sys,
                                                        caf::actor coordinator) {
  return [&sys, coordinator]() -> console::admin_caller {
    auto self = std::make_shared<caf::scoped_actor>(sys);
    return [self, coordinator](const std::string& request, uint64_t request_id, int timeout_ms) {
      return ask_coordinator(*self, coordinator, request, request_id, timeout_ms);
    };
  };
}

}  // namespace moerl::actors
