#!/usr/bin/env bash
# Generate the Python code for the rara.v1 wire contract with the pinned tools
# (grpcio-tools 1.85.1, mypy-protobuf 5.1.0 from the project venv).
#
#   api/gen.sh           regenerate rara/v1/ in place
#   api/gen.sh --check   regenerate into a temp dir; fail with a diff if rara/v1/ is stale
#
# The generated files are committed (never hand-edited) so that installing rara needs no
# protoc; --check is what CI runs to keep them honest.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
python="${PYTHON:-$root/.venv/bin/python}"
venv_bin="$(dirname "$python")"
files=(executor_pb2.py executor_pb2.pyi executor_pb2_grpc.py executor_pb2_grpc.pyi)

generate() { # $1: output root (the folder that holds rara/v1/)
    local out="$1"
    mkdir -p "$out/rara/v1"
    # google/protobuf/*.proto ship inside grpc_tools; ask it where rather than guess.
    local wkt
    wkt="$("$python" -c 'import grpc_tools, os; print(os.path.join(os.path.dirname(grpc_tools.__file__), "_proto"))')"
    "$python" -m grpc_tools.protoc \
        -I api/proto -I "$wkt" \
        --plugin=protoc-gen-mypy="$venv_bin/protoc-gen-mypy" \
        --plugin=protoc-gen-mypy_grpc="$venv_bin/protoc-gen-mypy_grpc" \
        --python_out="$out" --grpc_python_out="$out" \
        --mypy_out="$out" --mypy_grpc_out="$out" \
        api/proto/rara/v1/executor.proto
}

case "${1:-}" in
    "")
        generate "$root"
        echo "generated: ${files[*]/#/rara/v1/}"
        ;;
    --check)
        tmp="$(mktemp -d)"
        trap 'rm -rf "$tmp"' EXIT
        generate "$tmp"
        stale=0
        for f in "${files[@]}"; do
            if ! diff -u "rara/v1/$f" "$tmp/rara/v1/$f"; then
                stale=1
            fi
        done
        if [[ $stale -ne 0 ]]; then
            echo "rara/v1 is stale: run api/gen.sh and commit the result" >&2
            exit 1
        fi
        echo "rara/v1 is current"
        ;;
    *)
        echo "usage: $0 [--check]" >&2
        exit 2
        ;;
esac
