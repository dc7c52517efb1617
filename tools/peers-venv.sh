#!/bin/sh
# Makes or refreshes the virtual environment of the bench's peers (tools/deps.d/peers.bench.venv:
# DeepSpeed, s3torchconnector) for `make bench-peers`; never run by `make check`. It is layered on
# the torch 2.x environment (tools/venv.sh, tools/deps.d/torch2.test.venv): a .pth file puts that
# environment's site-packages after its own, so torch (4 GB with its CUDA runtime) is not installed
# twice, and pip runs with that environment's `pip freeze` as constraints, so that a peer can add
# packages but never replace torch or another package the torch2 tests use (it fails instead, and
# the bench shows the peer "not run" with pip's error). Says what it installs, with pip's progress;
# does nothing (and needs no network) when the environment was made from the same requirements.
# Usage: tools/peers-venv.sh            Where: $LIBCKPT_PEERS_VENV (default
# ${XDG_CACHE_HOME:-$HOME/.cache}/libckpt/peers-venv), on $LIBCKPT_TORCH_VENV (default .../torch2-venv).
set -eu
here=$(dirname "$0")
root=${XDG_CACHE_HOME:-$HOME/.cache}/libckpt
base=${LIBCKPT_TORCH_VENV:-$root/torch2-venv}
dir=${LIBCKPT_PEERS_VENV:-$root/peers-venv}
req=$here/deps.d/peers.bench.venv
py=/usr/bin/python3

sh "$here/venv.sh" "$here/deps.d/torch2.test.venv"
# Debian packages of the peers (DeepSpeed's aio op), only those missing
missing=""
for p in $(grep -v '^#' "$here/deps.d/peers.bench"); do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
if [ -n "$missing" ]; then
  echo "peers-venv: installing Debian packages:$missing"
  if [ "$(id -u)" != 0 ]; then
    echo "peers-venv: not root; install them yourself: apt-get install$missing" >&2; exit 1
  fi
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $missing ||
    { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $missing; }
fi

want=$( (grep -v '^[[:space:]]*#' "$req" | grep -v '^[[:space:]]*$'; cat "$base/.libckpt-requirements") | sort)
hash=$(printf '%s\n' "$want" | sha256sum | cut -d' ' -f1)
stamp=$dir/.libckpt-requirements
if [ -x "$dir/bin/python" ] && [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$hash" ]; then
  exit 0
fi
echo "peers-venv: installing into $dir (on $base):" $(grep -v '^[[:space:]]*#' "$req")
start=$(date +%s)
[ -x "$dir/bin/python" ] || "$py" -m venv "$dir"
site=$("$dir/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
basesite=$("$base/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
echo "$basesite" >"$site/libckpt-torch2.pth"
rm -f "$stamp"
cons=$dir/constraints.txt
# the base's versions, as constraints (editable or URL lines are not constraints pip takes)
"$base/bin/python" -m pip freeze --all | grep -E '^[A-Za-z0-9_.-]+==' | grep -v -E '^(pip|setuptools|wheel)==' >"$cons"
"$dir/bin/python" -m pip install --progress-bar on --no-cache-dir -c "$cons" -r "$req"
printf '%s\n' "$hash" >"$stamp"
echo "peers-venv: $dir ready in $(( $(date +%s) - start )) s"
