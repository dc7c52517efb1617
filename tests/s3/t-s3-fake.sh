#!/usr/bin/env bash
# The S3 backend against tests/s3/fakes3.py, a small server that injects what radosgw will not
# do on demand (issue 25, item 5): 503, 429 and SlowDown answers and dropped connections that must
# be retried with backoff, short bodies, a Range ignored, a multipart completion that fails inside
# its 200 (retried when InternalError, aborted when InvalidPart), listings without a token or with
# the same token again (an error, not a loop). No radosgw needed: python3 only.
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
# A pull's ranged pieces cut mid-way, damaged or short (tier_pull's parallel pieces).
"$O" s3://bkt/pull pull || { tail -n 30 "$T/server.log"; echo "FAIL: s3ops pull"; exit 1; }
echo "s3 fake: all passed"
