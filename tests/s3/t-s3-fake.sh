#!/usr/bin/env bash
# The S3 backend against tests/s3/fakes3.py, a small server that injects what radosgw will not
# do on demand: 503, 429 and SlowDown answers and dropped connections that must
# be retried with backoff, short bodies, a Range ignored, a multipart completion that fails inside
# its 200 (retried when InternalError, aborted when InvalidPart), listings without a token or with
# the same token again (an error, not a loop); a pull's ranged pieces cut mid-way, damaged or
# short; a profile's credential_process and its refresh; a stalled server (the request read,
# never answered): every operation times out within its bound, the cleanup after a failed or
# canceled upload is one bounded attempt, a cancel stops a request that awaits its answer; the
# sweep of incomplete multipart uploads. No radosgw needed: python3 only.
cd "$(dirname "$0")/../.." || exit 1
set -u
B=${B:-build}
O=$PWD/$B/tests/bin/s3ops
[ -x "$O" ] || { echo "skip: $O is not built (make tests)"; exit 77; }
command -v python3 >/dev/null || { echo "skip: python3 is needed for the fake server"; exit 77; }
T=$(mktemp -d "${TMPDIR:-/tmp}/ckpt-fakes3.XXXXXX") || exit 1
python3 tests/s3/fakes3.py "$T/port" 2>"$T/server.log" &
pid=$!
trap 'kill "$pid" 2>/dev/null; wait "$pid" 2>/dev/null; rm -rf "$T"' EXIT
end=$((SECONDS + 30))
until [ -s "$T/port" ]; do
	kill -0 "$pid" 2>/dev/null && [ $SECONDS -lt $end ] || { cat "$T/server.log"; echo "FAIL: no fake server"; exit 1; }
	sleep 0.05
done
export AWS_ENDPOINT_URL=http://127.0.0.1:$(cat "$T/port") AWS_ACCESS_KEY_ID=AK AWS_SECRET_ACCESS_KEY=SK
"$O" "s3://bkt/p?noreplace=check" fake || { tail -n 30 "$T/server.log"; echo "FAIL: s3ops fake"; exit 1; }
# A stalled server (reads the request, never answers): timeouts, bounded cleanup, cancel.
FAKES3_LOG="$T/server.log" "$O" s3://bkt/st stall || { tail -n 30 "$T/server.log"; echo "FAIL: s3ops stall"; exit 1; }
# The sweep of incomplete multipart uploads, in pages of 2.
"$O" "s3://bkt/sw?page=2" sweep || { tail -n 30 "$T/server.log"; echo "FAIL: s3ops sweep"; exit 1; }
# A pull's ranged pieces cut mid-way, damaged or short (tier_pull's parallel pieces).
"$O" s3://bkt/pull pull || { tail -n 30 "$T/server.log"; echo "FAIL: s3ops pull"; exit 1; }
# credential_process: run once at open; keys expiring within 5 minutes are fetched again before
# each request (the fake checks no signature: the number of runs is what is checked).
cat >"$T/creds.sh" <<'EOF'
#!/bin/sh
echo run >>"$0.count.$1"
printf '{"Version": 1, "AccessKeyId": "PAK", "SecretAccessKey": "PSK", "Expiration": "%s"}\n' \
	"$(date -u -d "+$2 sec" +%Y-%m-%dT%H:%M:%SZ)"
EOF
chmod +x "$T/creds.sh"
printf '[profile soon]\ncredential_process = %s soon 60\n[profile later]\ncredential_process = %s later 3600\n' \
	"$T/creds.sh" "$T/creds.sh" >"$T/config"
for p in soon later; do
	env -u AWS_ACCESS_KEY_ID -u AWS_SECRET_ACCESS_KEY AWS_CONFIG_FILE="$T/config" \
		AWS_SHARED_CREDENTIALS_FILE="$T/none" AWS_PROFILE=$p "$O" s3://bkt/cred verify absent 1
	rc=$?
	[ $rc = 4 ] || { echo "FAIL: s3ops verify with profile $p: exit $rc (4: absent)"; exit 1; }
done
soon=$(wc -l <"$T/creds.sh.count.soon") later=$(wc -l <"$T/creds.sh.count.later")
[ "$soon" -ge 3 ] && [ "$later" = 1 ] || {
	echo "FAIL: credential_process runs: $soon for keys expiring in 60 s (want >= 3), $later for an hour (want 1)"
	exit 1
}
echo "credential_process: $soon runs for keys expiring in 60 s, $later for keys of an hour"
echo "s3 fake: all passed"
