#!/bin/sh
# Installs the Debian 12 packages that libckpt needs to build and test, and only those that are
# missing, then the Python virtual environments of the set (tools/deps.d/*.SET.venv, made by
# tools/venv.sh outside the source tree; LIBCKPT_NO_VENV=1 leaves them out). Says what it installs;
# does nothing (and needs no network) when everything is present.
# Usage: tools/install-deps.sh [bootstrap|build|test|demo|fresh]   (default: test)
# bootstrap: make alone (tools/bootstrap.sh); fresh: what `make check-fresh` needs on the host.
set -eu
what=${1:-test}

pkgs="gcc make pkg-config liburing-dev libzstd-dev libxxhash-dev"
case "$what" in
  bootstrap) pkgs="make" ;;
  build|demo) ;;
  # procps: ps, which the kill tests use to find what is left of a job (not in a minimal root)
  test) pkgs="$pkgs fio python3 util-linux procps" ;;
  fresh) pkgs="mmdebstrap git util-linux" ;;
  *) echo "install-deps: unknown set '$what' (bootstrap, build, test, demo, fresh)" >&2; exit 2 ;;
esac
# Extra sets registered by other parts of the tree (one package list per file).
for f in "$(dirname "$0")"/deps.d/*."$what" "$(dirname "$0")"/deps.d/*.all; do
  [ -f "$f" ] && pkgs="$pkgs $(grep -v '^#' "$f" | tr '\n' ' ')"
done

missing=""
for p in $pkgs; do
  st=$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true)
  case "$st" in *"install ok installed"*) continue ;; esac
  case " $missing " in *" $p "*) ;; *) missing="$missing $p" ;; esac  # listed by two sets
done
if [ -n "$missing" ]; then
  echo "install-deps: installing missing Debian packages:$missing"
  if [ "$(id -u)" != 0 ]; then
    echo "install-deps: not root; run as root or install them yourself: apt-get install$missing" >&2
    exit 1
  fi
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  # shellcheck disable=SC2086
  apt-get install -y -qq --no-install-recommends $missing
fi

# Virtual environments (after the Debian packages: they need python3-venv).
[ "${LIBCKPT_NO_VENV:-0}" = 1 ] && exit 0
for f in "$(dirname "$0")"/deps.d/*."$what".venv; do
  [ -f "$f" ] && sh "$(dirname "$0")/venv.sh" "$f"
done
exit 0
