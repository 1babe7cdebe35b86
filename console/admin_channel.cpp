#include "console/admin_channel.h"

namespace moerl::console {

messages::admin_reply ask_admin(const admin_caller& call, const messages::admin_request& request,
                                int timeout_ms) {
  auto bytes = call(messages::encode(request), request.request_id, timeout_ms);
  auto rep = messages::decode<messages::admin_reply>(bytes);
  if (rep) return *rep;
  messages::admin_reply r;
  r.request_id = request.request_id;
  r.err = moerl::error(rep.err().code, "coordinator reply: " + rep.err().message);
  return r;
}

}  // namespace moerl::console
