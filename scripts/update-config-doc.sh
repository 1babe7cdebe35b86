#!/usr/bin/env bash
# Regenerates docs/CONFIG.md (the configuration reference) from the config schema.
set -euo pipefail
cd "$(dirname "$0")/.."
table=$(build/bin/moerl config keys --markdown)
/usr/bin/python3 - "$table" <<'PY'
import re, sys
table = sys.argv[1]
s = open("docs/CONFIG.md").read()
s = re.sub(r"(<!-- config-keys:begin -->\n).*?(<!-- config-keys:end -->)",
           lambda m: m.group(1) + table + "\n" + m.group(2), s, flags=re.S)
open("docs/CONFIG.md", "w").write(s)
PY
