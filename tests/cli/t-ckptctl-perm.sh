#!/usr/bin/env bash
# A pack this user may not read: export names the pack, not its own output
# file, and verify says permission denied, not DAMAGED. As root, ckptctl runs as nobody (root
# reads any file); skipped where that is not possible.
. tests/cli/lib.sh

if [ "$(id -u)" = 0 ]; then
	command -v setpriv >/dev/null || { echo "skip: root without setpriv"; exit 77; }
	as_user() { setpriv --reuid=65534 --regid=65534 --clear-groups "$@"; }
	chmod 755 "$T"
else
	as_user() { "$@"; }
fi
mkst model "$T/m.st" 1
ckptctl import -q "$STORE" --step 1 "$T/m.st" || exit 1
mkdir -m 777 "$T/out"
ckptctl verify -q "$STORE" --no-progress || exit 1 # a reader as root: STORE/leases/ exists now
chmod -R a+rX "$STORE"
as_user "$CK" verify "$STORE" --no-progress >/dev/null || { echo "skip: the store is not readable as nobody"; exit 77; }
chmod 000 "$STORE/packs/00000001.pack"

check perm-export as_user "$CK" export -q "$STORE" 1 -o "$T/out/m.st"
expect "no output file left" test -z "$(ls "$T/out")"
check perm-verify as_user "$CK" verify "$STORE" --no-progress
chmod 644 "$STORE/packs/00000001.pack"
check perm-verify-after as_user "$CK" verify "$STORE" --no-progress

finish
