package executor

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	pb "rara.local/api/gen/go/rara/v1"
	"rara.local/executor/go/artifacts"
)

// One job attempt, from accepted to its single terminal event.
//
// Stopping is two-stage, like a pod: a stop request (Cancel, client disconnect, deadline,
// shutdown) first closes Job.Stopping() so the operation can finish cleanly; after the grace
// the operation's context is cancelled (the hard stop). An operation that ignores even that
// is abandoned (a goroutine cannot be killed): its later reports are dropped. Either way the
// stop reason, not whatever the operation did afterwards, picks the terminal event.

// MaxMessageBytes is the wire limit on both ends (rara/executor/limits.py): large data
// travels as artifacts, by reference.
const MaxMessageBytes = 16 * 1024 * 1024

const maxProgressMessage = 4096 // characters; a progress line is a status, not a log

type stopReason int

const (
	running stopReason = iota
	stopCancel
	stopDisconnect
	stopDeadline
	stopShutdown
)

func (r stopReason) String() string {
	return [...]string{"", "cancel", "disconnect", "deadline", "shutdown"}[r]
}

// OutputArtifact is one entry of a result's manifest.
type OutputArtifact struct {
	Name      string
	Ref       artifacts.Ref
	MediaType string // empty: the ref's
}

// Outcome is what an operation returns: a JSON-encodable result and its artifacts.
type Outcome struct {
	Result    any
	Artifacts []OutputArtifact
}

// Job is what an operation sees: the decoded job, the shared artifact store (noting what the
// operation reads, reported with its success), and the ways to report (progress,
// checkpoints) and to learn that it should stop. A Job built by hand (an operation's unit
// test) is never stopped and its reports go nowhere.
type Job struct {
	*Spec
	Store *artifacts.Store
	rj    *runningJob
}

// Stopping is closed when the job was asked to stop (cancel, disconnect, deadline,
// shutdown): finish cleanly before the hard stop cancels the operation's context.
func (j *Job) Stopping() <-chan struct{} {
	if j.rj == nil {
		return nil
	}
	return j.rj.stop
}

// Cancelled reports whether the job was asked to stop.
func (j *Job) Cancelled() bool {
	select {
	case <-j.Stopping():
		return true
	default:
		return false
	}
}

// Progress reports how far the job is; fraction < 0 means unknown. Coalesced: only the
// latest update is sure to be sent.
func (j *Job) Progress(fraction float64, message string, metrics map[string]float64) {
	if j.rj == nil {
		return
	}
	// Progress leaves the process (stored by the worker, shown by `rara runs show`): mask
	// credential-looking text, in metric names too, and bound the message.
	message = Redact(message)
	if len(message) > maxProgressMessage {
		message = strings.ToValidUTF8(message[:maxProgressMessage], "")
	}
	masked := make(map[string]float64, len(metrics))
	for name, value := range metrics {
		masked[Redact(name)] = value
	}
	p := &pb.JobProgress{Message: message, Metrics: masked}
	if fraction >= 0 {
		p.Fraction = &fraction
	}
	j.rj.out.putProgress(p)
}

// SaveCheckpoint sends a checkpoint event (the worker records it durably) and returns once
// it was handed to the stream, or the stream is gone. A later attempt of the same step gets
// it as Spec.Checkpoint.
func (j *Job) SaveCheckpoint(state map[string]any, artifact *artifacts.Ref) error {
	data, err := Dumps(state)
	if err != nil {
		return Failed(fmt.Sprintf("checkpoint state is not JSON: %v", err), false)
	}
	// Checked here, so a bad state fails in the operation that produced it: the worker
	// persists checkpoints, so no credential and nothing over the wire limit.
	if problem := CredentialProblem(state, "checkpoint state"); problem != "" {
		return Failed(problem, false)
	}
	if len(data) > MaxMessageBytes/2 {
		return Failed(fmt.Sprintf("checkpoint state: message is %d bytes; the executor wire "+
			"limit is %d bytes: pass large data as artifacts", len(data), MaxMessageBytes), false)
	}
	if j.rj == nil {
		return nil
	}
	cp := &pb.JobCheckpoint{StateJson: data}
	if artifact != nil {
		cp.Artifact = refToProto(*artifact, "")
	}
	written := make(chan struct{})
	j.rj.out.put(&pb.ExecuteResponse{Event: &pb.ExecuteResponse_Checkpoint{Checkpoint: cp}},
		written)
	<-written
	return nil
}

type runningJob struct {
	spec    *Spec
	op      Operation
	store   *artifacts.Store
	out     *outbox
	grace   time.Duration
	log     *slog.Logger
	mu      sync.Mutex
	reason  stopReason
	text    string
	stop    chan struct{}   // closed on the first stop request
	outcome string          // the terminal event's kind, once put
	reads   artifacts.Reads // what the operation read through Job.Store (JobSucceeded.reads)
	onEnd   func()          // frees the job's slot; called just before the terminal event
	output  *stepLog        // what the operation writes (Job.Log), on its way to the outbox
}

func newRunningJob(spec *Spec, op Operation, store *artifacts.Store, grace time.Duration,
	log *slog.Logger) *runningJob {
	out := newOutbox(50 * time.Millisecond)
	return &runningJob{spec: spec, op: op, store: store, out: out, output: newStepLog(out),
		grace: grace, stop: make(chan struct{}),
		log: log.With("idempotency_key", spec.IdempotencyKey, "attempt", spec.Attempt,
			"capability", spec.Capability)}
}

// requestStop asks the job to stop; the first reason wins.
func (r *runningJob) requestStop(reason stopReason, text string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.reason != running {
		return
	}
	if text == "" {
		text = reason.String()
	}
	r.reason, r.text = reason, text
	close(r.stop)
}

func (r *runningJob) finish(ev *pb.ExecuteResponse) {
	switch ev.GetEvent().(type) {
	case *pb.ExecuteResponse_Succeeded:
		r.outcome = "succeeded"
	case *pb.ExecuteResponse_Cancelled:
		r.outcome = "cancelled"
	default:
		r.outcome = "failed"
	}
	r.output.end() // the whole log before the verdict
	if r.onEnd != nil {
		r.onEnd()
	}
	r.out.put(ev, nil)
}

type opResult struct {
	outcome *Outcome
	err     error
}

// run runs the operation and puts every event, the terminal one last, into the outbox.
func (r *runningJob) run() {
	r.out.put(&pb.ExecuteResponse{Event: &pb.ExecuteResponse_Accepted{Accepted: &pb.JobAccepted{}}}, nil)
	r.out.put(&pb.ExecuteResponse{Event: &pb.ExecuteResponse_Running{Running: &pb.JobRunning{}}}, nil)
	hard, hardStop := context.WithCancel(context.Background())
	defer hardStop()
	done := make(chan opResult, 1)
	job := &Job{Spec: r.spec, Store: r.store.NotingReads(&r.reads), rj: r}
	go func() {
		defer func() {
			if p := recover(); p != nil {
				r.log.Error("operation panicked", "panic", fmt.Sprint(p))
				done <- opResult{err: &JobError{Code: pb.ErrorCode_ERROR_CODE_HANDLER_ERROR,
					Message: fmt.Sprintf("operation panicked: %v", p), Retryable: true,
					Details: map[string]string{"error": "panic"}}}
			}
		}()
		outcome, err := r.op.Run(hard, job)
		done <- opResult{outcome, err}
	}()
	var deadline <-chan time.Time
	if !r.spec.Deadline.IsZero() {
		timer := time.NewTimer(time.Until(r.spec.Deadline))
		defer timer.Stop()
		deadline = timer.C
	}
	select {
	case res := <-done:
		r.finish(r.result(res))
		return
	case <-r.stop:
	case <-deadline:
		r.requestStop(stopDeadline, "") // no-op if another reason came first
	}
	grace := time.NewTimer(r.grace)
	defer grace.Stop()
	select {
	case <-done:
	case <-grace.C:
		r.log.Warn("operation ignored stop; stopping it hard", "grace", r.grace.Seconds())
		hardStop()
		select { // a context-aware operation returns at once; one that does not is abandoned
		case <-done:
		case <-time.After(time.Second):
			r.log.Warn("operation ignored the hard stop; abandoned")
		}
	}
	r.finish(r.stopped())
}

func (r *runningJob) result(res opResult) *pb.ExecuteResponse {
	if res.err != nil {
		r.log.Info("operation failed", "error", res.err.Error())
		return &pb.ExecuteResponse{Event: &pb.ExecuteResponse_Failed{Failed: &pb.JobFailed{
			Error: errorFrom(res.err)}}}
	}
	outcome := res.outcome
	if outcome == nil {
		outcome = &Outcome{}
	}
	result, err := Dumps(outcome.Result)
	if err != nil {
		return failedEvent(pb.ErrorCode_ERROR_CODE_HANDLER_ERROR,
			fmt.Sprintf("result is not JSON: %v", err), false)
	}
	// The worker stores the result in PostgreSQL: a credential must not get there.
	if problem := CredentialProblem(outcome.Result, "the operation's result"); problem != "" {
		return failedEvent(pb.ErrorCode_ERROR_CODE_HANDLER_ERROR, problem, false)
	}
	if len(result) > MaxMessageBytes-64*1024 { // room for the manifest
		return failedEvent(pb.ErrorCode_ERROR_CODE_HANDLER_ERROR, fmt.Sprintf("result: message "+
			"is %d bytes; the executor wire limit is %d bytes: pass large data as artifacts",
			len(result), MaxMessageBytes), false)
	}
	manifest := make([]*pb.ArtifactRef, 0, len(outcome.Artifacts))
	for _, art := range outcome.Artifacts {
		if !r.store.Exists(art.Ref) {
			return failedEvent(pb.ErrorCode_ERROR_CODE_HANDLER_ERROR, fmt.Sprintf(
				"artifact %q (%s) is not in the store", art.Name, art.Ref.Digest), false)
		}
		entry := refToProto(art.Ref, art.Name)
		if art.MediaType != "" {
			entry.MediaType = art.MediaType
		}
		manifest = append(manifest, entry)
	}
	return &pb.ExecuteResponse{Event: &pb.ExecuteResponse_Succeeded{Succeeded: &pb.JobSucceeded{
		ResultJson: result, Artifacts: manifest,
		Reads: &pb.ArtifactReads{Digests: r.reads.Sorted()}}}}
}

func (r *runningJob) stopped() *pb.ExecuteResponse {
	r.mu.Lock()
	reason, text := r.reason, r.text
	r.mu.Unlock()
	switch reason {
	case stopDeadline:
		return failedEvent(pb.ErrorCode_ERROR_CODE_DEADLINE_EXCEEDED,
			fmt.Sprintf("deadline %s passed", r.spec.Deadline.Format(time.RFC3339Nano)), true)
	case stopShutdown:
		return failedEvent(pb.ErrorCode_ERROR_CODE_UNAVAILABLE, "executor is shutting down", true)
	default:
		return &pb.ExecuteResponse{Event: &pb.ExecuteResponse_Cancelled{
			Cancelled: &pb.JobCancelled{Reason: text}}}
	}
}
