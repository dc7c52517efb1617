#!/bin/sh
# The README's two commands: `sh tools/bootstrap.sh demo` and `sh tools/bootstrap.sh check`.
# A minimal Debian 12 has no make: this installs it when it is missing (through
# tools/install-deps.sh, which says what it installs), then runs `make TARGET...`. The make targets
# install the rest of what they need themselves. Where make exists, `make demo` and `make check`
# do the same.
set -eu
cd "$(dirname "$0")/.."
[ $# -gt 0 ] || { echo "usage: sh tools/bootstrap.sh demo|check|TARGET..." >&2; exit 2; }
command -v make >/dev/null 2>&1 || sh tools/install-deps.sh bootstrap
exec make "$@"
