#!/usr/bin/env bash
# What a fresh Debian machine lacks for rara's tests: PostgreSQL's server binaries and Go
# (Go builds tools only: buf, helm, etcd and kube-apiserver for the operator tests).
set -euo pipefail
need=()
command -v initdb >/dev/null || ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || need+=(postgresql)
command -v go >/dev/null || need+=(golang-go)
command -v runuser >/dev/null || need+=(util-linux)
command -v openssl >/dev/null || need+=(openssl)
command -v chromium >/dev/null || need+=(chromium)  # tests/ui: the browser Playwright drives
command -v tmux >/dev/null || need+=(tmux)  # tests/worker/test_screens.py: a real terminal
if ((${#need[@]})); then
  echo "installing: ${need[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi
# Debian's postgresql package starts a cluster of its own; rara never uses it.
