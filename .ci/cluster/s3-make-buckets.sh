#!/bin/bash
# Create buckets on versitygw's posix backend before the server is up (the S3 pod's init
# container; rara-deps.yaml). A bucket there is a top-level directory, but one made by mkdir
# lacks the owner and ACL that CreateBucket stores in its extended attributes (only the root
# account could use it), so they are made through the server's own API: versitygw on
# 127.0.0.1 for as long as `versitygw admin create-bucket` takes, then stopped. Idempotent.
#   s3-make-buckets DATA_DIR BUCKET...   (env: ROOT_ACCESS_KEY_ID, ROOT_SECRET_ACCESS_KEY)
set -euo pipefail
data="$1"; shift
endpoint=127.0.0.1:7079
versitygw --port "${endpoint}" --quiet posix "${data}" &
pid=$!
trap 'kill "${pid}" 2>/dev/null; wait "${pid}" 2>/dev/null || true' EXIT
admin() {
  ADMIN_ACCESS_KEY_ID="${ROOT_ACCESS_KEY_ID}" ADMIN_SECRET_ACCESS_KEY="${ROOT_SECRET_ACCESS_KEY}" \
    versitygw admin --endpoint-url "http://${endpoint}" "$@"
}
for _ in $(seq 100); do admin list-buckets >/dev/null 2>&1 && break; sleep 0.1; done
for bucket in "$@"; do
  if admin list-buckets | awk 'NR > 2 {print $1}' | grep -qxF "${bucket}"; then
    echo "bucket ${bucket}: present"
  else
    admin create-bucket --owner "${ROOT_ACCESS_KEY_ID}" --bucket "${bucket}"
    echo "bucket ${bucket}: created"
  fi
done
