#include "zmq/context.h"

#include <zmq.h>

#include "zmq/check.h"

namespace moerl::zmq {

result<std::shared_ptr<zmq_context>> zmq_context::create() {
  void* ctx = zmq_ctx_new();
  if (!ctx) return detail::zmq_failure("zmq_ctx_new()", zmq_errno(), __FILE__, __LINE__);
  return std::shared_ptr<zmq_context>(new zmq_context(ctx));
}

zmq_context::~zmq_context() { zmq_ctx_term(ctx_); }

}  // namespace moerl::zmq
