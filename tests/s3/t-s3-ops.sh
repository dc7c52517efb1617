#!/usr/bin/env bash
# The S3 backend (rmt_s3_ops) against a real radosgw started for this script (tests/s3/rgw.sh):
# put/get/range/stat/list in pages of 2 keys/NOREPLACE/delete, multipart (5 MiB parts),
# the errors (wrong keys, a missing bucket, a refused request, a refused connection, a full
# remote: each named in the message), the bandwidth cap, and a profile from the AWS files.
cd "$(dirname "$0")/../.." || exit 1
. tests/s3/lib.sh
run() {
	echo "== $*"
	"$O" "$@" || { echo "FAIL: s3ops $*"; fail=1; }
}

run s3://bkt mkbucket
run "s3://bkt/pfx?page=2" basic
# Virtual-hosted: the bucket in the host name (bkt.localhost; rgw.sh sets rgw dns name).
run "s3://bkt/vh?addressing=virtual&endpoint=http://localhost:$RGW_PORT" basic
run s3://bkt/mp multipart
# NOREPLACE checked first (a server without conditional writes): a HEAD, then the put; for large
# objects a multipart upload checked again before its completion.
run "s3://bkt/nc?noreplace=check&page=3" basic
run "s3://bkt/ncm?noreplace=check" multipart
run s3://bkt/th threads
# The sweep of incomplete multipart uploads (what killed puts leave), in pages of 2.
run "s3://bkt/sw?page=2" sweeprgw

# A second user who may not read bkt: a refused request.
rgw_user other OTHERACCESSKEY000001 othersecret0000000000000000000000000001
S3T_AK2=OTHERACCESSKEY000001 S3T_SK2=othersecret0000000000000000000000000001 run s3://bkt/e errors

# A full remote: a user with a 1 MiB quota.
rgw_user full FULLACCESSKEY0000001 fullsecret00000000000000000000000000001
rgw_admin quota set --quota-scope=user --uid=full --max-size=1048576 >/dev/null &&
	rgw_admin quota enable --quota-scope=user --uid=full >/dev/null || fail=1
AWS_ACCESS_KEY_ID=FULLACCESSKEY0000001 AWS_SECRET_ACCESS_KEY=fullsecret00000000000000000000000000001 \
	run s3://fullbkt mkbucket
AWS_ACCESS_KEY_ID=FULLACCESSKEY0000001 AWS_SECRET_ACCESS_KEY=fullsecret00000000000000000000000000001 \
	run s3://fullbkt/x nospc

run s3://bkt/bw bandwidth

# Endpoint, region and keys from a profile of the AWS files alone (no AWS_* in the environment
# but the files' paths): [profile ckpt] in config with its s3 sub-section, [ckpt] in credentials.
P=$RGW_DIR/aws
mkdir -p "$P"
cat >"$P/config" <<EOF
[default]
region = eu-west-9
[profile ckpt]
region = us-east-1
s3 =
    endpoint_url = $RGW_ENDPOINT
    addressing_style = path
EOF
cat >"$P/credentials" <<EOF
[default]
aws_access_key_id = WRONG
aws_secret_access_key = WRONG
[ckpt]
aws_access_key_id = $AWS_ACCESS_KEY_ID
aws_secret_access_key = $AWS_SECRET_ACCESS_KEY
EOF
env -u AWS_ENDPOINT_URL -u AWS_ACCESS_KEY_ID -u AWS_SECRET_ACCESS_KEY -u AWS_REGION \
	AWS_CONFIG_FILE="$P/config" AWS_SHARED_CREDENTIALS_FILE="$P/credentials" AWS_PROFILE=ckpt \
	"$O" "s3://bkt/prof?page=3" basic >"$P/out" 2>&1 || { cat "$P/out"; echo "FAIL: profile ckpt"; fail=1; }
env -u AWS_ENDPOINT_URL -u AWS_ACCESS_KEY_ID -u AWS_SECRET_ACCESS_KEY -u AWS_REGION \
	AWS_CONFIG_FILE="$P/config" AWS_SHARED_CREDENTIALS_FILE="$P/credentials" \
	"$O" "s3://bkt/prof?endpoint=$RGW_ENDPOINT" basic >"$P/out" 2>&1 &&
	{ echo "FAIL: the default profile's wrong keys were accepted"; fail=1; }
grep -q "InvalidAccessKeyId" "$P/out" || { cat "$P/out"; echo "FAIL: no InvalidAccessKeyId"; fail=1; }
echo "== profile ckpt from the AWS files: ok"

[ $fail = 0 ] && echo "s3 ops: all passed"
exit $fail
