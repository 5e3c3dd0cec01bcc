package executor

import (
	"context"
	"fmt"
	"regexp"
	"sort"
	"strconv"
	"strings"

	pb "rara.local/api/gen/go/rara/v1"
)

// Func runs one job attempt. ctx is cancelled at the hard stop (the grace after a stop
// request ran out); job.Stopping() / job.Cancelled() is the cooperative signal before it.
// A nil Outcome means a null result and no artifacts.
type Func func(ctx context.Context, job *Job) (*Outcome, error)

// Operation is a named, versioned piece of work: jobs name it "name@major".
type Operation struct {
	Name        string
	Major       uint32
	Run         Func
	GPU         uint32
	MemoryBytes uint64
}

// Capability is "name@major".
func (o Operation) Capability() string { return fmt.Sprintf("%s@%d", o.Name, o.Major) }

func (o Operation) toProto() *pb.Capability {
	return &pb.Capability{Name: o.Name, Major: o.Major,
		Resources: &pb.Resources{Gpu: o.GPU, MemoryBytes: o.MemoryBytes}}
}

var (
	nameRE  = regexp.MustCompile(`^[a-z][a-z0-9_.-]*$`)
	majorRE = regexp.MustCompile(`^[0-9]{1,9}$`) // bounded to fit an int32, as in definitions
)

// Registry maps a name to its one served major version.
type Registry struct{ byName map[string]Operation }

// NewRegistry is an empty registry.
func NewRegistry() *Registry { return &Registry{byName: map[string]Operation{}} }

// Register adds an operation; a bad name or a name registered twice is an error.
func (r *Registry) Register(op Operation) error {
	if !nameRE.MatchString(op.Name) || strings.HasSuffix(op.Name, "\n") {
		return fmt.Errorf("operation name must match %s, got %q", nameRE, op.Name)
	}
	if op.Run == nil {
		return fmt.Errorf("operation %q has no Run", op.Name)
	}
	if _, dup := r.byName[op.Name]; dup {
		return fmt.Errorf("operation %q is already registered", op.Name)
	}
	r.byName[op.Name] = op
	return nil
}

// MustRegister is Register for static registrations.
func (r *Registry) MustRegister(op Operation) {
	if err := r.Register(op); err != nil {
		panic(err)
	}
}

// ParseCapability splits "name@major"; a malformed one is a non-retryable INVALID_ARGUMENT.
func ParseCapability(capability string) (string, uint32, *JobError) {
	i := strings.LastIndex(capability, "@")
	if i < 0 || !nameRE.MatchString(capability[:i]) || !majorRE.MatchString(capability[i+1:]) {
		return "", 0, Refuse(pb.ErrorCode_ERROR_CODE_INVALID_ARGUMENT,
			fmt.Sprintf("capability must look like name@major, got %q", capability))
	}
	major, _ := strconv.ParseUint(capability[i+1:], 10, 32)
	return capability[:i], uint32(major), nil
}

// Resolve finds the operation for "name@major", or says why not (non-retryable).
func (r *Registry) Resolve(capability string) (Operation, *JobError) {
	name, major, err := ParseCapability(capability)
	if err != nil {
		return Operation{}, err
	}
	op, ok := r.byName[name]
	if !ok {
		e := Refuse(pb.ErrorCode_ERROR_CODE_UNKNOWN_CAPABILITY,
			fmt.Sprintf("capability %q is not served by this executor", name))
		e.Details = map[string]string{"capability": capability}
		return Operation{}, e
	}
	if op.Major != major {
		e := Refuse(pb.ErrorCode_ERROR_CODE_INCOMPATIBLE_VERSION, fmt.Sprintf(
			"capability %q: job wants major version %d, this executor serves %d",
			name, major, op.Major))
		e.Details = map[string]string{"capability": capability, "served": op.Capability()}
		return Operation{}, e
	}
	return op, nil
}

// Operations in name order.
func (r *Registry) Operations() []Operation {
	out := make([]Operation, 0, len(r.byName))
	for _, op := range r.byName {
		out = append(out, op)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}
