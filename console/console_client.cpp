#include "console/console_client.h"

#include <zmq.h>

#include <memory>

#include "common/status_try.h"
#include "common/yaml_scalar.h"
#include "zmq/check.h"
#include "zmq/context.h"

namespace moerl::console {

namespace {
struct zmq_sock_deleter {
  void operator()(void* s) const { zmq_close(s); }
};
}  // namespace

result<double> parse_console_deadline(const std::string& text) {
  const auto s = parse_yaml_number(text);
  if (!s || !(*s > 0) || *s > kMaxConsoleDeadlineS)
    return error(errc::invalid_argument,
                 "--deadline must be seconds in (0, " +
                     std::to_string(static_cast<int>(kMaxConsoleDeadlineS)) + "], got '" + text +
                     "'");
  return *s;
}

result<size_t> parse_console_history(const std::string& text) {
  size_t used = 0;
  unsigned long long n = 0;
  try {
    n = std::stoull(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (text.empty() || used != text.size() || text[0] == '-' || n > kMaxConsoleHistory)
    return error(errc::invalid_argument, "--history must be a count of entries in [0, " +
                                             std::to_string(kMaxConsoleHistory) + "], got '" +
                                             text + "'");
  return static_cast<size_t>(n);
}

status check_console_request(const messages::admin_request& req) {
  const std::string& cmd = req.command;
  const auto& args = req.args;
  auto no_args = [&]() -> status {
    if (!args.empty())
      return error(errc::invalid_argument, cmd + " takes no arguments, got '" + args[0] + "'");
    return ok_status();
  };
  auto one_node = [](const std::string& what, size_t num_nodes) -> status {
    if (num_nodes == 0)
      return error(errc::invalid_argument, what + " needs a NODE (id, id prefix or name)");
    if (num_nodes > 1)
      return error(errc::invalid_argument,
                   what + " takes one NODE, got " + std::to_string(num_nodes));
    return ok_status();
  };
  bool takes_deadline = false;
  const bool takes_history = cmd == "nodes";
  if (messages::is_view_verb(cmd) || cmd == "shutdown") {
    if (auto st = no_args(); !st) return st;
  } else if (cmd == "inject") {
    const std::string kind = args.empty() ? "" : args[0];
    if (kind != "spot" && kind != "rebalance" && kind != "kill" && kind != "sigterm")
      return error(errc::unknown_command,
                   "inject needs one of spot|rebalance|kill|sigterm, got '" + kind + "'");
    if (auto st = one_node("inject " + kind, args.size() - 1); !st) return st;
    takes_deadline = kind == "spot" || kind == "rebalance";
  } else if (cmd == "drain") {
    if (auto st = one_node("drain", args.size()); !st) return st;
    takes_deadline = true;
  } else {
    return error(errc::unknown_command,
                 "unknown command '" + cmd + "' (" + messages::kAdminVerbs + ")");
  }
  for (const auto& [name, value] : req.options) {
    if (name == "history") {
      if (!takes_history) return error(errc::invalid_argument, "--history applies to nodes only");
      if (auto n = parse_console_history(value); !n) return n.err();
      continue;
    }
    if (name != "deadline") return error(errc::invalid_argument, "unknown option '" + name + "'");
    if (!takes_deadline)
      return error(errc::invalid_argument,
                   "--deadline applies to inject spot|rebalance and drain only");
    if (auto d = parse_console_deadline(value); !d) return d.err();
  }
  return ok_status();
}

result<messages::admin_reply> console_call(const std::string& address,
                                           const messages::admin_request& req, int timeout_ms,
                                           std::optional<zmq::plane_keys> keys) {
  if (auto st = check_console_request(req); !st) return st.err();
  ASSIGN_OR_RETURN(auto ctx, zmq::zmq_context::create(std::move(keys)));
  std::unique_ptr<void, zmq_sock_deleter> sock(zmq_socket(ctx->handle(), ZMQ_REQ));
  if (!sock)
    return error(errc::io_error,
                 std::string("zmq_socket(REQ) failed: ") + zmq_strerror(zmq_errno()));
  auto call = [&]() -> result<std::string> {
    int linger = 0;
    ZMQ_CHECK(zmq_setsockopt(sock.get(), ZMQ_LINGER, &linger, sizeof linger));
    STATUS_TRY(ctx->secure_client(sock.get()));
    ZMQ_CHECK(zmq_connect(sock.get(), address.c_str()));
    auto bytes = messages::encode(req);
    ZMQ_CHECK(zmq_send(sock.get(), bytes.data(), bytes.size(), 0));
    zmq_pollitem_t item{sock.get(), 0, ZMQ_POLLIN, 0};
    int n = zmq_poll(&item, 1, timeout_ms);
    ZMQ_CHECK(n);
    if (n == 0)
      return error(errc::timeout,
                   "no reply from the coordinator console at " + address + " within " +
                       std::to_string(timeout_ms) + " ms" +
                       (ctx->encrypted() ? ""
                                         : " (a cluster with a plane secret answers only CURVE "
                                           "clients: set node.plane_secret_file)"));
    zmq_msg_t msg;
    zmq_msg_init(&msg);
    if (zmq_msg_recv(&msg, sock.get(), 0) == -1) {
      int e = zmq_errno();
      zmq_msg_close(&msg);
      return zmq::detail::zmq_failure("zmq_msg_recv(REQ)", e, __FILE__, __LINE__);
    }
    std::string out(static_cast<const char*>(zmq_msg_data(&msg)), zmq_msg_size(&msg));
    zmq_msg_close(&msg);
    return out;
  };
  auto raw = call();
  if (!raw) return raw.err();
  return messages::decode<messages::admin_reply>(*raw);
}

}  // namespace moerl::console
