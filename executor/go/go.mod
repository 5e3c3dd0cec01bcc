// The Go executor: serves rara.v1 ExecutorService (api/proto/rara/v1/executor.proto).
module rara.local/executor/go

go 1.25.0

require (
	golang.org/x/sys v0.47.0
	golang.org/x/text v0.41.0
	google.golang.org/grpc v1.83.2
	rara.local/api/gen/go v0.0.0
)

require (
	golang.org/x/net v0.58.0 // indirect
	google.golang.org/genproto/googleapis/rpc v0.0.0-20260526163538-3dc84a4a5aaa // indirect
	google.golang.org/protobuf v1.36.11 // indirect
)

// The generated contract lives in this repository (api/gen.sh writes it), never fetched.
replace rara.local/api/gen/go => ../../api/gen/go
