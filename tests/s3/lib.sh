# What the S3 tests (tests/s3/t-s3-*.sh, run from the repository root by tests/run.sh) share:
# s3ops built, the radosgw packages there (else a skip, saying which), one radosgw started for the
# script (tests/s3/rgw.sh; stopped by its trap), $O the driver, $fail the verdict.
set -u
B=${B:-build}
O=$PWD/$B/tests/bin/s3ops
[ -x "$O" ] || { echo "skip: $O is not built (make tests)"; exit 77; }
. tests/s3/rgw.sh
rgw_require
rgw_start || exit 1
fail=0
