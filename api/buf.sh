#!/usr/bin/env bash
# buf, pinned, for the rara.v1 contract.
#
#   api/buf.sh lint       lint api/proto (STANDARD rules, see api/proto/buf.yaml)
#   api/buf.sh breaking   compare api/proto with the previous commit's (FILE rules)
#
# buf is pinned and built once into the user's tool cache by .ci/go-tool.sh (every clone reuses
# it). BUF_AGAINST overrides what `breaking` compares with (any buf input, e.g.
# ".git#branch=main,subdir=api/proto" in a pull request).
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
breaking() {
    local against="${BUF_AGAINST:-}"
    if [[ -z "$against" ]]; then
        # The previous commit must exist and hold the contract; otherwise this is the first
        # version (new repository, shallow clone, proto just added): nothing to break.
        if ! git rev-parse --verify --quiet HEAD~1 >/dev/null; then
            echo "buf breaking: no previous commit (first commit or shallow clone); skipped"
            return 0
        fi
        if ! git cat-file -e HEAD~1:api/proto/rara/v1/executor.proto 2>/dev/null; then
            echo "buf breaking: HEAD~1 has no api/proto/rara/v1/executor.proto; first version, skipped"
            return 0
        fi
        against=".git#ref=HEAD~1,subdir=api/proto"
    fi
    "$buf" breaking api/proto --against "$against"
    echo "buf breaking: no breaking changes against $against"
}

case "${1:-}" in
    lint)
        buf="$(.ci/go-tool.sh buf)"
        "$buf" lint api/proto
        echo "buf lint: ok"
        ;;
    breaking)
        buf="$(.ci/go-tool.sh buf)"
        breaking
        ;;
    *)
        echo "usage: $0 lint|breaking" >&2
        exit 2
        ;;
esac
