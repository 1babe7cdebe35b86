// open_store: picks the backend from the URL's scheme.
#include "common/status_try.h"
#include "store/local_store.h"
#include "store/object_store.h"
#include "store/s3_settings.h"
#include "store/s3_store.h"

namespace moerl::store {

result<std::unique_ptr<object_store>> open_store(const std::string& url, const config& cfg) {
  if (url.empty()) return error(errc::invalid_config, "store.url is empty");
  if (url.rfind("s3://", 0) == 0) {
    ASSIGN_OR_RETURN(auto settings, s3_settings_from_url(url, cfg));
    ASSIGN_OR_RETURN(auto s, s3_store::open(std::move(settings)));
    return std::unique_ptr<object_store>(std::move(s));
  }
  std::string path = url;
  if (url.rfind("file://", 0) == 0) {
    path = url.substr(7);
    if (path.empty() || path[0] != '/')
      return error(errc::invalid_config,
                   "store URL '" + url + "': file:// needs an absolute path (file:///dir)");
  } else if (url.find("://") != std::string::npos) {
    return error(
        errc::invalid_config,
        "store URL '" + url + "': unknown scheme (use a path, file:///dir or s3://bucket/prefix)");
  }
  ASSIGN_OR_RETURN(auto s, local_store::open(path, cfg.get_bool("store.local_fsync")));
  return std::unique_ptr<object_store>(std::move(s));
}

}  // namespace moerl::store
