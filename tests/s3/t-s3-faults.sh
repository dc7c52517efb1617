#!/usr/bin/env bash
# radosgw killed (kill -9) in the middle of a multipart upload:
#   1. restarted at once: the put, retrying, completes within its retries, and the key holds the
#      whole object (never a part of it);
#   2. not restarted: the put fails within its few retries with an error naming the endpoint, and
#      once radosgw is back the key is absent.
# Also a single PUT (an object under the part size) killed the same way, and a radosgw that
# hangs (SIGSTOP): the request times out, it does not hang.
# The uploads are slowed by the bandwidth cap (8 MiB/s) so that the kill lands in the middle;
# the test waits for a mark file the uploader creates at a quarter of the bytes, never a sleep.
cd "$(dirname "$0")/../.." || exit 1
. tests/s3/lib.sh
T=$RGW_DIR/t
mkdir -p "$T"
"$O" s3://bkt mkbucket || exit 1

# wait_file FILE PID: until FILE exists (or PID has exited), at most 60 s.
wait_file() {
	local end=$((SECONDS + 60))
	until [ -e "$1" ]; do
		kill -0 "$2" 2>/dev/null || return 1
		[ $SECONDS -lt $end ] || return 1
		sleep 0.05
	done
}

# killed_put KEY MIB RETRIES RESTART: starts the put, kills radosgw at a quarter, restarts it
# (RESTART=1) or not until the put has ended; sets $put_rc and $verify_rc.
killed_put() {
	local key=$1 mib=$2 retries=$3 restart=$4 pid
	rm -f "$T/mark"
	"$O" s3://bkt/k slowput "$key" "$mib" "$retries" "$T/mark" >"$T/$key.out" 2>&1 &
	pid=$!
	if ! wait_file "$T/mark" "$pid"; then
		echo "FAIL: $key: the upload never reached a quarter"; cat "$T/$key.out"; fail=1
	fi
	rgw_kill_gw
	[ "$restart" = 1 ] && { rgw_start_gw || exit 1; }
	wait "$pid"
	put_rc=$?
	[ "$restart" = 1 ] || { rgw_start_gw || exit 1; }
	cat "$T/$key.out"
	"$O" s3://bkt/k verify "$key" "$mib"
	verify_rc=$?
}

echo "== 1. multipart, radosgw killed and restarted"
killed_put mp-restart 24 14 1
# 14 retries back off for 40 s at least: radosgw is back long before they run out, so the put
# must succeed (a put without retries fails here: checked).
if [ "$put_rc" != 0 ] || [ "$verify_rc" != 0 ]; then
	echo "FAIL: put exit $put_rc (want 0), key $verify_rc (0 whole, 4 absent, 1 partial or wrong)"
	fail=1
fi

echo "== 2. multipart, radosgw killed and not restarted"
killed_put mp-dead 24 2 0
if [ "$put_rc" != 3 ] || [ "$verify_rc" != 4 ]; then
	echo "FAIL: put exit $put_rc (want 3: -CKPT_E_IO), key $verify_rc (want 4: absent)"; fail=1
fi
grep -q "endpoint $RGW_ENDPOINT" "$T/mp-dead.out" ||
	{ echo "FAIL: the error does not name the endpoint $RGW_ENDPOINT"; fail=1; }

echo "== 3. single PUT, radosgw killed and restarted"
killed_put single 4 14 1
[ "$put_rc/$verify_rc" = 0/0 ] || { echo "FAIL: single put exit $put_rc, key $verify_rc"; fail=1; }

echo "== 4. radosgw stopped (SIGSTOP): connections are accepted, nothing answers"
kill -STOP "$RGW_PID_gw"
"$O" s3://bkt/k hung || { echo "FAIL: a hung server"; fail=1; }
kill -CONT "$RGW_PID_gw"

[ $fail = 0 ] && echo "s3 faults: all passed"
exit $fail
