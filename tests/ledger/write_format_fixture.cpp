// Writes the ledger store of format_fixture.h into DIR. tests/ledger/data/format_v2/ was
// made with it by the ledger of that time; rerun it only to add a fixture for a new format
// version, never to refresh the old one (that would stop testing old files).
#include <cstdio>

#include "store/local_store.h"
#include "tests/ledger/format_fixture.h"

int main(int argc, char** argv) {
  using namespace moerl;
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s DIR\n", argv[0]);
    return 2;
  }
  auto store = store::local_store::open(argv[1], /*durable=*/false);
  if (!store || !ledger::fixture::run_format_fixture(**store)) {
    std::fprintf(stderr, "the fixture run failed\n");
    return 1;
  }
  return 0;
}
