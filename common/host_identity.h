// Which processes can share memory with this one, as a string to compare: the boot id (one
// kernel) and the namespaces named (e.g. "net" makes a process in another network namespace,
// which moerl's tests use to stand for another host, count as elsewhere; "mnt" tells whether
// /dev/shm is the same directory; "pid" whether /proc/<pid> names the same process).
#pragma once

#include <initializer_list>
#include <string>

namespace moerl {

// "<boot id>|net:[4026531840]|..." for each of `namespaces` ("net", "pid", "mnt", ...).
std::string host_identity(std::initializer_list<const char*> namespaces);

}  // namespace moerl
