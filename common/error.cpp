#include "common/error.h"

namespace moerl {

const char* errc_name(errc code) {
  switch (code) {
    case errc::ok: return "ok";
    case errc::invalid_argument: return "invalid_argument";
    case errc::invalid_config: return "invalid_config";
    case errc::malformed_message: return "malformed_message";
    case errc::message_too_large: return "message_too_large";
    case errc::truncated_message: return "truncated_message";
    case errc::unknown_command: return "unknown_command";
    case errc::unknown_node: return "unknown_node";
    case errc::unauthorized: return "unauthorized";
    case errc::timeout: return "timeout";
    case errc::peer_dead: return "peer_dead";
    case errc::stale_attempt: return "stale_attempt";
    case errc::duplicate: return "duplicate";
    case errc::stale_policy: return "stale_policy";
    case errc::not_found: return "not_found";
    case errc::io_error: return "io_error";
    case errc::fabric_error: return "fabric_error";
    case errc::provider_unavailable: return "provider_unavailable";
    case errc::cuda_error: return "cuda_error";
    case errc::capacity_exceeded: return "capacity_exceeded";
    case errc::shutting_down: return "shutting_down";
    case errc::internal: return "internal";
  }
  return "unknown_error_code";
}

std::string error::to_string() const { return std::string(errc_name(code)) + ": " + message; }

}  // namespace moerl
