// Starts tests/store/moto_s3_server.py (moto's S3 server with IAM authentication on) as a
// child process and reads its endpoint and credentials. The child serves until this
// object closes its stdin, and also exits when the test process dies.
#pragma once

#include <sys/types.h>

#include <memory>
#include <string>

#include "common/error.h"

namespace moerl::store::testing {

struct moto_info {
  std::string endpoint;  // http://127.0.0.1:<port>
  std::string region;
  std::string bucket;
  std::string access_key_id;
  std::string secret_access_key;
};

// True when the test python (/usr/bin/python3, or MOERL_TEST_PYTHON) has moto and boto3.
bool python_has_moto();

class moto_server {
 public:
  // Waits up to `timeout_ms` for the server's JSON line; the error carries its stderr.
  static result<std::unique_ptr<moto_server>> start(const std::string& script, int timeout_ms);
  ~moto_server();
  const moto_info& info() const { return info_; }
  // The server's process (a test freezes it with SIGSTOP to make the store unreachable).
  pid_t pid() const { return pid_; }

 private:
  moto_server() = default;
  pid_t pid_ = -1;
  int stdin_fd_ = -1;
  std::string stderr_path_;
  moto_info info_;
};

}  // namespace moerl::store::testing
