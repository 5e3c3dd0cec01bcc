# PostgreSQL for the in-cluster test database (tests/e2e/kind, `make cluster` demos): Debian
# bookworm's postgresql package on the locally made base (no registry: no postgres:17 image).
# Not for production: one instance, data in the container's volume, password auth.
#   docker build -f charts/rara/images/postgres.Dockerfile \
#     --build-arg BASE_IMAGE=rara.local/debian:bookworm -t rara-postgres .
# Environment: POSTGRES_USER, POSTGRES_PASSWORD, POSTGRES_DB (created on first start),
# PGDATA (default /var/lib/rara-postgres/data; mount a volume there).
# Non-root: runs as uid/gid 10001 like the rara images (postgres refuses to run as root).
ARG BASE_IMAGE=rara.local/debian:bookworm
FROM ${BASE_IMAGE}
RUN apt-get update \
 && apt-get install -y --no-install-recommends postgresql-15 \
 && rm -rf /var/lib/apt/lists/* /var/cache/apt/archives/*.deb /var/log/apt /var/log/dpkg.log \
 && groupadd --system --gid 10001 rara \
 && useradd --system --uid 10001 --gid rara --home-dir /var/lib/rara-postgres --create-home rara \
 && install -d -o 10001 -g 10001 -m 0700 /var/lib/rara-postgres/data \
 && install -d -o 10001 -g 10001 -m 0775 /var/run/postgresql
COPY charts/rara/images/postgres-entrypoint.sh /usr/local/bin/postgres-entrypoint
ENV PATH=/usr/lib/postgresql/15/bin:$PATH PGDATA=/var/lib/rara-postgres/data LANG=C.UTF-8
USER 10001:10001
EXPOSE 5432
STOPSIGNAL SIGINT
ENTRYPOINT ["/usr/local/bin/postgres-entrypoint"]
