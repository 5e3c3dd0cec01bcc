package executor

import (
	"context"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	pb "rara.local/api/gen/go/rara/v1"
)

func TestLoadsObject(t *testing.T) {
	obj, err := LoadsObject([]byte(`{"n": 9007199254740993, "d": 0.10000000000000000001}`), "p")
	if err != nil {
		t.Fatal(err)
	}
	out, _ := Dumps(obj)
	if string(out) != `{"d":0.10000000000000000001,"n":9007199254740993}` {
		t.Fatalf("numbers must round-trip exactly: %s", out)
	}
	if obj, err := LoadsObject(nil, "p"); err != nil || len(obj) != 0 {
		t.Fatalf("empty means {}: %v %v", obj, err)
	}
	for in, want := range map[string]string{
		`{not json`:         "not valid UTF-8 JSON",
		`[1, 2]`:            "must be a JSON object, got list",
		`{"a": 1} {}`:       "extra data",
		`{"a": 1e999}`:      "out of range",
		"{\"a\": \"\xff\"}": "invalid UTF-8",
		`{"a": NaN}`:        "not valid",
	} {
		_, err := LoadsObject([]byte(in), "payload_json")
		if err == nil || !strings.Contains(err.Message, want) || err.Retryable ||
			err.Code != pb.ErrorCode_ERROR_CODE_INVALID_ARGUMENT {
			t.Errorf("%q: want %q, got %+v", in, want, err)
		}
	}
}

func TestDecodeJob(t *testing.T) {
	digest := "sha256:" + strings.Repeat("ab", 32)
	job := &pb.Job{IdempotencyKey: "k", Capability: "x@1", Attempt: 2,
		Inputs:         []*pb.ArtifactRef{{Name: "prep/data.txt", Digest: digest, Size: 3}},
		LastCheckpoint: &pb.Checkpoint{Attempt: 1, Seq: 4, StateJson: []byte(`{"epoch":7}`)},
		Deadline:       timestamppb.New(time.Unix(2000000000, 0))}
	spec, err := DecodeJob(job)
	if err != nil {
		t.Fatal(err)
	}
	if spec.Inputs["prep/data.txt"].Digest != digest || spec.Inputs["data.txt"].Digest != digest {
		t.Fatalf("inputs by full and bare name: %+v", spec.Inputs)
	}
	if spec.Inputs["data.txt"].MediaType != "application/octet-stream" {
		t.Fatalf("default media type: %+v", spec.Inputs["data.txt"])
	}
	if spec.Checkpoint == nil || spec.Checkpoint.Seq != 4 || spec.Deadline.Unix() != 2000000000 {
		t.Fatalf("checkpoint/deadline: %+v", spec)
	}
	bad := []struct {
		mutate func(*pb.Job)
		want   string
	}{
		{func(j *pb.Job) { j.IdempotencyKey = "" }, "idempotency_key is required"},
		{func(j *pb.Job) { j.Capability = "" }, "capability is required"},
		{func(j *pb.Job) { j.Attempt = 0 }, "attempt must be >= 1"},
		{func(j *pb.Job) { j.Inputs[0].Digest = "md5:x" }, "sha256:<64 hex>"},
		{func(j *pb.Job) { j.LastCheckpoint.StateJson = []byte("[]") }, "last_checkpoint.state_json"},
		{func(j *pb.Job) { j.Deadline = &timestamppb.Timestamp{Seconds: 1 << 62} }, "out of range"},
	}
	for _, c := range bad {
		j := &pb.Job{IdempotencyKey: "k", Capability: "x@1", Attempt: 1,
			Inputs:         []*pb.ArtifactRef{{Name: "a", Digest: digest}},
			LastCheckpoint: &pb.Checkpoint{StateJson: []byte("{}")}}
		c.mutate(j)
		if _, err := DecodeJob(j); err == nil || !strings.Contains(err.Message, c.want) {
			t.Errorf("want %q, got %v", c.want, err)
		}
	}
}

func TestRegistryResolve(t *testing.T) {
	r := NewRegistry()
	run := func(context.Context, *Job) (*Outcome, error) { return nil, nil }
	r.MustRegister(Operation{Name: "text.normalize", Major: 2, Run: run})
	if err := r.Register(Operation{Name: "text.normalize", Major: 3, Run: run}); err == nil {
		t.Fatal("one major per name")
	}
	if err := r.Register(Operation{Name: "Bad Name", Major: 1, Run: run}); err == nil {
		t.Fatal("names are checked")
	}
	if op, err := r.Resolve("text.normalize@2"); err != nil || op.Capability() != "text.normalize@2" {
		t.Fatalf("%v %v", op, err)
	}
	for capability, code := range map[string]pb.ErrorCode{
		"text.normalize@3": pb.ErrorCode_ERROR_CODE_INCOMPATIBLE_VERSION,
		"other@2":          pb.ErrorCode_ERROR_CODE_UNKNOWN_CAPABILITY,
		"text.normalize":   pb.ErrorCode_ERROR_CODE_INVALID_ARGUMENT,
		"x@²":              pb.ErrorCode_ERROR_CODE_INVALID_ARGUMENT,
		"x@1234567890":     pb.ErrorCode_ERROR_CODE_INVALID_ARGUMENT,
	} {
		if _, err := r.Resolve(capability); err == nil || err.Code != code || err.Retryable {
			t.Errorf("%s: want %v, got %v", capability, code, err)
		}
	}
}

func TestAuthCheck(t *testing.T) {
	for listen, loop := range map[string]bool{"127.0.0.1:1": true, "[::1]:1": true,
		"localhost:1": true, "0.0.0.0:1": false, "10.0.0.1:1": false, "example.com:1": false} {
		if IsLoopback(listen) != loop {
			t.Errorf("IsLoopback(%s) != %v", listen, loop)
		}
	}
	if err := (AuthConfig{}).Check("127.0.0.1:1"); err == nil {
		t.Error("no authentication must be refused")
	}
	if err := (AuthConfig{InsecureLoopback: true}).Check("0.0.0.0:1"); err == nil {
		t.Error("--insecure-loopback off loopback must be refused")
	}
	if err := (AuthConfig{InsecureLoopback: true}).Check("127.0.0.1:1"); err != nil {
		t.Error(err)
	}
	if err := (AuthConfig{Token: "t", TLSCert: "c"}).Check("0.0.0.0:1"); err == nil {
		t.Error("cert without key must be refused")
	}
	for _, listen := range []string{"0.0.0.0:1", "[::]:1", ":1", "10.0.0.1:1", "example.com:1"} {
		if err := (AuthConfig{Token: "t"}).Check(listen); err == nil ||
			!strings.Contains(err.Error(), "--tls-cert") {
			t.Errorf("a token in clear text on %s must be refused naming --tls-cert, got %v", listen, err)
		}
	}
	if err := (AuthConfig{Token: "t", TLSCert: "c", TLSKey: "k"}).Check("0.0.0.0:1"); err != nil {
		t.Error(err)
	}
	if err := (AuthConfig{Token: "t"}).Check("127.0.0.1:1"); err != nil {
		t.Error(err)
	}
}

func TestCredentialScreen(t *testing.T) {
	leaked := "ghp_" + strings.Repeat("a", 36)
	payload, _ := LoadsObject([]byte(`{"b": ["x", "`+leaked+`"], "a": {"Password": "hunter2"}, "c": 1}`), "p")
	got := CredentialProblem(payload, "payload_json")
	want := "payload_json holds what looks like a secret at $.a.Password (a 'Password' field), " +
		"$.b[1] (looks like a GitHub token); secrets travel by reference (secretRef), never by value"
	if got != want {
		t.Fatalf("got  %s\nwant %s", got, want)
	}
	if CredentialProblem(map[string]any{"digest": "sha256:" + strings.Repeat("ab", 32),
		"token": ""}, "x") != "" {
		t.Fatal("a digest or an empty token field is not a credential")
	}
	if r := Redact("push to https://bob:s3cret@example.com and " + leaked); strings.Contains(r, "s3cret") ||
		strings.Contains(r, leaked) {
		t.Fatal(r)
	}
	job := &pb.Job{IdempotencyKey: "k", Capability: "x@1", Attempt: 1,
		PayloadJson: []byte(`{"url": "postgres://u:pw@db/x"}`)}
	if _, err := DecodeJob(job); err == nil || err.Retryable ||
		!strings.Contains(err.Message, "$.url (looks like a password in URL)") ||
		strings.Contains(err.Message, "pw@") {
		t.Fatalf("a payload holding a credential is refused by path: %v", err)
	}
}
