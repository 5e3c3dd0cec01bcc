#!/usr/bin/env bash
# Generate the code for the rara.v1 wire contract, Python and Go, with pinned tools:
#   Python: grpcio-tools 1.85.1 and mypy-protobuf 5.1.0 from the project venv -> rara/v1/
#   Go:     the same protoc (grpc_tools) with protoc-gen-go and protoc-gen-go-grpc, pinned
#           and built once into the user's tool cache by .ci/go-tool.sh -> api/gen/go/rara/v1/
#
#   api/gen.sh           regenerate both in place
#   api/gen.sh --check   regenerate into a temp dir; fail with a diff if either is stale
#
# The generated files are committed (never hand-edited) so that installing rara needs no
# protoc and a Go executor needs no code generation; --check is what CI runs to keep them
# honest.
#
# The Go import path is given here (protoc's M option), not as `option go_package` in the
# proto: buf's FILE rules (api/buf.sh breaking) count any change of go_package, "" to a value
# included, as breaking; this is what buf's managed mode does for the same reason. The Go
# package lives in its own module (api/gen/go/go.mod), which Go executors use through a
# `replace` to this folder.
set -euo pipefail

GO_MODULE=rara.local/api/gen/go
GO_IMPORT="$GO_MODULE/rara/v1;rarav1"

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
python="${PYTHON:-$root/.venv/bin/python}"
venv_bin="$(dirname "$python")"
py_files=(executor_pb2.py executor_pb2.pyi executor_pb2_grpc.py executor_pb2_grpc.pyi)
go_files=(executor.pb.go executor_grpc.pb.go)
proto=rara/v1/executor.proto

generate() { # $1: output root (the folder that holds rara/v1/ and api/gen/go/)
    local out="$1"
    mkdir -p "$out/rara/v1" "$out/api/gen/go"
    # google/protobuf/*.proto ship inside grpc_tools; ask it where rather than guess.
    local wkt gen_go gen_go_grpc
    wkt="$("$python" -c 'import grpc_tools, os; print(os.path.join(os.path.dirname(grpc_tools.__file__), "_proto"))')"
    gen_go="$(.ci/go-tool.sh protoc-gen-go)"
    gen_go_grpc="$(.ci/go-tool.sh protoc-gen-go-grpc)"
    "$python" -m grpc_tools.protoc \
        -I api/proto -I "$wkt" \
        --plugin=protoc-gen-mypy="$venv_bin/protoc-gen-mypy" \
        --plugin=protoc-gen-mypy_grpc="$venv_bin/protoc-gen-mypy_grpc" \
        --python_out="$out" --grpc_python_out="$out" \
        --mypy_out="$out" --mypy_grpc_out="$out" \
        "api/proto/$proto"
    "$python" -m grpc_tools.protoc \
        -I api/proto -I "$wkt" \
        --plugin=protoc-gen-go="$gen_go" --plugin=protoc-gen-go-grpc="$gen_go_grpc" \
        --go_out="$out/api/gen/go" --go-grpc_out="$out/api/gen/go" \
        --go_opt="M$proto=$GO_IMPORT" --go_opt="module=$GO_MODULE" \
        --go-grpc_opt="M$proto=$GO_IMPORT" --go-grpc_opt="module=$GO_MODULE" \
        "api/proto/$proto"
}

case "${1:-}" in
    "")
        generate "$root"
        echo "generated: ${py_files[*]/#/rara/v1/} ${go_files[*]/#/api/gen/go/rara/v1/}"
        ;;
    --check)
        tmp="$(mktemp -d)"
        trap 'rm -rf "$tmp"' EXIT
        generate "$tmp"
        stale=0
        for f in "${py_files[@]/#/rara/v1/}" "${go_files[@]/#/api/gen/go/rara/v1/}"; do
            if ! diff -u "$f" "$tmp/$f"; then
                stale=1
            fi
        done
        if [[ $stale -ne 0 ]]; then
            echo "generated code is stale: run api/gen.sh (make proto) and commit the result" >&2
            exit 1
        fi
        echo "rara/v1 and api/gen/go/rara/v1 are current"
        ;;
    *)
        echo "usage: $0 [--check]" >&2
        exit 2
        ;;
esac
