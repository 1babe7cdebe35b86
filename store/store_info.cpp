#include "store/store_info.h"

#include <curl/curl.h>

namespace moerl::store {

nlohmann::json durable_plane_info(const object_store& store) {
  const curl_version_info_data* v = curl_version_info(CURLVERSION_NOW);
  // CURLOPT_AWS_SIGV4 exists from libcurl 7.75.0 on.
  const bool sigv4 = v->version_num >= 0x074b00;
  return {{"store", store.describe()},
          {"libcurl", v->version ? v->version : "unknown"},
          {"tls", v->ssl_version ? v->ssl_version : "none"},
          {"aws_sigv4", sigv4}};
}

}  // namespace moerl::store
