#include "messages/admin.capnp.h"
#include "messages/admin.h"
#include "messages/detail/frame.h"
#include "messages/error.capnp.h"

namespace moerl::messages {
using namespace detail;

namespace {

void write_error(schema::Error::Builder b, const moerl::error& e) {
  b.setCode(static_cast<schema::ErrorCode>(e.code));
  b.setMessage(text(e.message));
}

status read_error(schema::Error::Reader r, moerl::error& e) {
  const auto code = static_cast<uint16_t>(r.getCode());
  if (code > static_cast<uint16_t>(errc::internal))
    return error{errc::malformed_message, "error: unknown code " + std::to_string(code)};
  e.code = static_cast<errc>(code);
  e.message = str(r.getMessage());
  return {};
}

}  // namespace

template <>
std::string encode(const admin_request& m) {
  capnp::MallocMessageBuilder b;
  auto r = b.initRoot<schema::AdminRequest>();
  r.setRequestId(m.request_id);
  r.setToken(text(m.token));
  r.setCommand(text(m.command));
  auto args = r.initArgs(m.args.size());
  for (unsigned i = 0; i < m.args.size(); ++i) args.set(i, text(m.args[i]));
  auto opts = r.initOptions(m.options.size());
  for (unsigned i = 0; i < m.options.size(); ++i) {
    opts[i].setName(text(m.options[i].first));
    opts[i].setValue(text(m.options[i].second));
  }
  return frame(kind::admin_request, b);
}
template <>
result<admin_request> decode(const void* data, size_t size, const decode_limits& lim) {
  return decode_frame<schema::AdminRequest, admin_request>(
      kind::admin_request, data, size, lim,
      [](schema::AdminRequest::Reader r, admin_request& m) -> status {
        m.request_id = r.getRequestId();
        m.token = str(r.getToken());
        m.command = str(r.getCommand());
        for (auto a : r.getArgs()) m.args.push_back(str(a));
        for (auto o : r.getOptions()) m.options.emplace_back(str(o.getName()), str(o.getValue()));
        return {};
      });
}

template <>
std::string encode(const admin_reply& m) {
  capnp::MallocMessageBuilder b;
  auto r = b.initRoot<schema::AdminReply>();
  r.setRequestId(m.request_id);
  r.setOk(m.ok);
  write_error(r.initError(), m.err);
  r.setBodyJson(text(m.body_json));
  return frame(kind::admin_reply, b);
}
template <>
result<admin_reply> decode(const void* data, size_t size, const decode_limits& lim) {
  return decode_frame<schema::AdminReply, admin_reply>(
      kind::admin_reply, data, size, lim,
      [](schema::AdminReply::Reader r, admin_reply& m) -> status {
        m.request_id = r.getRequestId();
        m.ok = r.getOk();
        if (auto st = read_error(r.getError(), m.err); !st) return st;
        m.body_json = str(r.getBodyJson());
        return {};
      });
}

template <>
std::string encode(const wire_error& m) {
  capnp::MallocMessageBuilder b;
  write_error(b.initRoot<schema::Error>(), m.value);
  return frame(kind::error, b);
}
template <>
result<wire_error> decode(const void* data, size_t size, const decode_limits& lim) {
  return decode_frame<schema::Error, wire_error>(
      kind::error, data, size, lim,
      [](schema::Error::Reader r, wire_error& m) { return read_error(r, m.value); });
}

}  // namespace moerl::messages
