#include "actors/admin_call.h"

#include <caf/all.hpp>

#include "actors/atoms.h"

namespace moerl::actors {

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

messages::admin_reply ask_coordinator(caf::scoped_actor& self, const caf::actor& coordinator,
                                      const messages::admin_request& request, int timeout_ms) {
  auto bytes =
      ask_coordinator(self, coordinator, messages::encode(request), request.request_id, timeout_ms);
  auto rep = messages::decode<messages::admin_reply>(bytes);
  if (rep) return *rep;
  messages::admin_reply r;
  r.request_id = request.request_id;
  r.err = moerl::error(rep.err().code, "coordinator reply: " + rep.err().message);
  return r;
}

}  // namespace moerl::actors
