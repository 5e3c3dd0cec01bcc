// The generated Go code of the rara.v1 wire contract (api/gen.sh writes rara/v1/; never edit).
// Not published: Go executors in this repository reach it with a `replace` to this folder.
module rara.local/api/gen/go

go 1.25.0

require (
	google.golang.org/grpc v1.83.2
	google.golang.org/protobuf v1.36.11
)

require (
	golang.org/x/net v0.58.0 // indirect
	golang.org/x/sys v0.47.0 // indirect
	golang.org/x/text v0.41.0 // indirect
	google.golang.org/genproto/googleapis/rpc v0.0.0-20260526163538-3dc84a4a5aaa // indirect
)
