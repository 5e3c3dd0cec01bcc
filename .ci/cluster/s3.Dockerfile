# The S3 server of the kind cluster (rara-deps.yaml: Deployment rara-s3), where rara keeps its
# artifacts there: versitygw, the server the S3 store's tests run on (.ci/go-tool.sh builds
# it from its Go module: one static binary, CGO off, so it needs nothing from the base), posix
# backend on a directory (a volume; every sub-directory of it is a bucket). Test
# infrastructure, not a production object store.
# images.sh builds it from a context of its own holding the binary and s3-make-buckets.sh:
#   .ci/cluster/images.sh s3      -> rara.local/rara-s3:<versitygw version>-<hash>
# Environment: ROOT_ACCESS_KEY_ID / ROOT_SECRET_ACCESS_KEY, the key pair of its root account.
ARG BASE_IMAGE=rara.local/debian:bookworm
FROM ${BASE_IMAGE}
RUN groupadd --system --gid 10001 rara \
 && useradd --system --uid 10001 --gid rara --home-dir /var/lib/rara-s3 --create-home rara
COPY versitygw /usr/local/bin/versitygw
COPY s3-make-buckets.sh /usr/local/bin/s3-make-buckets
USER 10001:10001
EXPOSE 7070
ENTRYPOINT ["/usr/local/bin/versitygw"]
CMD ["--port", ":7070", "--health", "/health", "--quiet", "posix", "/var/lib/rara-s3"]
