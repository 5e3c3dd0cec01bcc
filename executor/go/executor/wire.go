package executor

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"strings"
	"time"
	"unicode/utf8"

	pb "rara.local/api/gen/go/rara/v1"
	"rara.local/executor/go/artifacts"
)

// JSON crosses the wire as UTF-8 bytes (see the comment on Job in executor.proto). Numbers
// decode as json.Number, so an int64 id or an exact decimal round-trips digit for digit.

// Checkpoint is the latest state an earlier attempt saved.
type Checkpoint struct {
	Attempt  uint32
	Seq      uint64
	State    map[string]any
	Artifact *artifacts.Ref
}

// Spec is a decoded, validated Job.
type Spec struct {
	RunID          int64
	StepID         int64
	StepKey        string
	Attempt        uint32
	IdempotencyKey string
	Capability     string
	Input          map[string]any
	Inputs         map[string]artifacts.Ref // "<step>/<name>", and "<name>" when unambiguous
	Deadline       time.Time                // zero: none
	Checkpoint     *Checkpoint
}

type jobKey struct {
	idempotencyKey string
	attempt        uint32
}

func (s *Spec) key() jobKey { return jobKey{s.IdempotencyKey, s.Attempt} }

func invalid(format string, args ...any) *JobError {
	return Refuse(pb.ErrorCode_ERROR_CODE_INVALID_ARGUMENT, fmt.Sprintf(format, args...))
}

// LoadsObject decodes a JSON object strictly (as PostgreSQL's jsonb would take it); empty
// bytes mean {}.
func LoadsObject(data []byte, what string) (map[string]any, *JobError) {
	if len(data) == 0 {
		return map[string]any{}, nil
	}
	if !utf8.Valid(data) { // encoding/json would replace bad bytes silently
		return nil, invalid("%s is not valid UTF-8 JSON: invalid UTF-8", what)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var value any
	if err := dec.Decode(&value); err != nil {
		return nil, invalid("%s is not valid UTF-8 JSON: %v", what, err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, invalid("%s is not valid UTF-8 JSON: extra data after the value", what)
	}
	obj, ok := value.(map[string]any)
	if !ok {
		return nil, invalid("%s must be a JSON object, got %s", what, jsonType(value))
	}
	if err := finite(obj); err != nil {
		return nil, invalid("%s: %v", what, err)
	}
	return obj, nil
}

func jsonType(v any) string {
	switch v.(type) {
	case []any:
		return "list"
	case string:
		return "str"
	case json.Number:
		return "number"
	case bool:
		return "bool"
	case nil:
		return "null"
	}
	return fmt.Sprintf("%T", v)
}

// finite refuses numbers jsonb cannot hold ("1e999": valid syntax, infinite value).
func finite(v any) error {
	switch x := v.(type) {
	case map[string]any:
		for _, item := range x {
			if err := finite(item); err != nil {
				return err
			}
		}
	case []any:
		for _, item := range x {
			if err := finite(item); err != nil {
				return err
			}
		}
	case json.Number:
		if f, err := x.Float64(); err != nil || math.IsInf(f, 0) {
			s := x.String()
			if len(s) > 20 {
				s = s[:20]
			}
			return fmt.Errorf("number %s is out of range", s)
		}
	}
	return nil
}

// Dumps encodes a JSON value compactly, without HTML escaping (the bytes are stored, not shown).
func Dumps(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimRight(buf.Bytes(), "\n"), nil
}

func refFromProto(ref *pb.ArtifactRef) (artifacts.Ref, *JobError) {
	if err := artifacts.ParseDigest(ref.GetDigest()); err != nil {
		return artifacts.Ref{}, invalid("artifact %q: %v", ref.GetName(), err)
	}
	media := ref.GetMediaType()
	if media == "" {
		media = artifacts.DefaultMediaType
	}
	return artifacts.Ref{Digest: ref.GetDigest(), Size: ref.GetSize(), MediaType: media}, nil
}

func refToProto(ref artifacts.Ref, name string) *pb.ArtifactRef {
	return &pb.ArtifactRef{Name: name, Digest: ref.Digest, Size: ref.Size, MediaType: ref.MediaType}
}

func decodeInputs(refs []*pb.ArtifactRef) (map[string]artifacts.Ref, *JobError) {
	full := make(map[string]artifacts.Ref, len(refs))
	bare := map[string][]string{}
	for _, r := range refs {
		ref, err := refFromProto(r)
		if err != nil {
			return nil, err
		}
		full[r.GetName()] = ref
		short := r.GetName()[strings.LastIndex(r.GetName(), "/")+1:]
		bare[short] = append(bare[short], r.GetName())
	}
	out := make(map[string]artifacts.Ref, 2*len(full))
	for name, ref := range full {
		out[name] = ref
	}
	for short, names := range bare {
		if _, taken := out[short]; len(names) == 1 && !taken {
			out[short] = full[names[0]]
		}
	}
	return out, nil
}

// DecodeJob validates and converts; every refusal names the field at fault.
func DecodeJob(job *pb.Job) (*Spec, *JobError) {
	if job.GetIdempotencyKey() == "" {
		return nil, invalid("job.idempotency_key is required")
	}
	if job.GetCapability() == "" {
		return nil, invalid("job.capability is required (name@major)")
	}
	if job.GetAttempt() < 1 {
		// Attempts count from 1 (the lease sets attempt+1); 0 means the field was not set.
		return nil, invalid("job.attempt must be >= 1, got %d", job.GetAttempt())
	}
	spec := &Spec{RunID: job.GetRunId(), StepID: job.GetStepId(), StepKey: job.GetStepKey(),
		Attempt: job.GetAttempt(), IdempotencyKey: job.GetIdempotencyKey(),
		Capability: job.GetCapability()}
	if job.LastCheckpoint != nil {
		cp := job.LastCheckpoint
		state, err := LoadsObject(cp.GetStateJson(), "last_checkpoint.state_json")
		if err != nil {
			return nil, err
		}
		spec.Checkpoint = &Checkpoint{Attempt: cp.GetAttempt(), Seq: cp.GetSeq(), State: state}
		if cp.Artifact != nil {
			ref, err := refFromProto(cp.Artifact)
			if err != nil {
				return nil, err
			}
			spec.Checkpoint.Artifact = &ref
		}
	}
	var err *JobError
	if spec.Input, err = LoadsObject(job.GetPayloadJson(), "payload_json"); err != nil {
		return nil, err
	}
	if problem := CredentialProblem(spec.Input, "payload_json"); problem != "" {
		return nil, invalid("%s", problem)
	}
	if spec.Inputs, err = decodeInputs(job.GetInputs()); err != nil {
		return nil, err
	}
	if job.Deadline != nil {
		if verr := job.Deadline.CheckValid(); verr != nil {
			return nil, invalid("job.deadline is out of range (seconds=%d, nanos=%d)",
				job.Deadline.GetSeconds(), job.Deadline.GetNanos())
		}
		spec.Deadline = job.Deadline.AsTime()
	}
	return spec, nil
}
