// A cluster's own CA for the control plane's TLS (`moerl ca init DIR`): CAF 0.17 checks no
// host name, so every certificate the CA signed is accepted as any node; one CA per cluster,
// never shared (docs/SECURITY.md). Writes, in a new directory (mode 0700):
//   ca.crt   the CA certificate: node.tls_ca on every node;
//   tls.crt  the node certificate the CA signed: node.tls_certificate on every node;
//   tls.key  its private key (0600): node.tls_key;
//   ca.key   the CA's private key (0600): keep it off the cluster; only signing more needs it.
// The names are those of a Kubernetes TLS Secret plus ca.crt (deploy/components/cluster-secrets).
// Keys are ECDSA P-256; certificates last `days`.
#pragma once

#include <string>

#include "common/error.h"

namespace moerl::actors {

status write_cluster_ca(const std::string& dir, int days = 365);

}  // namespace moerl::actors
