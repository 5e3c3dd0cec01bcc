// Package executor serves rara.v1 ExecutorService: admission, job bookkeeping, the
// contract's event order, two-stage stopping, and graceful drain.
//
// Admission order for Execute, cheapest refusal first and never after work started
// (the same as the Python executor, rara/executor/server.py): draining -> UNAVAILABLE
// status; malformed or incompatible job -> a single non-retryable failed event naming the
// field; deadline already passed -> a single retryable DEADLINE_EXCEEDED; same attempt
// already running -> ALREADY_EXISTS; no free slot -> RESOURCE_EXHAUSTED. A slot is held by
// the job, not the RPC, so a job still stopping after its client went away keeps counting.
package executor

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	pb "rara.local/api/gen/go/rara/v1"
	"rara.local/executor/go/artifacts"
)

// Version identifies this implementation in GetCapabilities.
const Version = "rara-executor-go/0.1.0"

// Service implements pb.ExecutorServiceServer.
type Service struct {
	pb.UnimplementedExecutorServiceServer
	registry    *Registry
	store       *artifacts.Store
	max         int
	cancelGrace time.Duration
	log         *slog.Logger
	draining    atomic.Bool

	mu       sync.Mutex
	jobs     map[jobKey]*runningJob
	sessions map[*session]struct{}
	active   int           // jobs holding a slot (including ones still stopping)
	idle     chan struct{} // closed and replaced whenever active drops to 0
}

// NewService builds the service; maxConcurrency >= 1.
func NewService(registry *Registry, store *artifacts.Store, maxConcurrency int,
	cancelGrace time.Duration, log *slog.Logger) (*Service, error) {
	if maxConcurrency < 1 {
		return nil, fmt.Errorf("max_concurrency must be >= 1, got %d", maxConcurrency)
	}
	return &Service{registry: registry, store: store, max: maxConcurrency,
		cancelGrace: cancelGrace, log: log, jobs: map[jobKey]*runningJob{},
		sessions: map[*session]struct{}{},
		idle:     make(chan struct{})}, nil
}

// GetCapabilities lists the operations served and the load.
func (s *Service) GetCapabilities(context.Context, *pb.GetCapabilitiesRequest) (
	*pb.GetCapabilitiesResponse, error) {
	ops := s.registry.Operations()
	caps := make([]*pb.Capability, len(ops))
	for i, op := range ops {
		caps[i] = op.toProto()
	}
	s.mu.Lock()
	active := s.active
	s.mu.Unlock()
	return &pb.GetCapabilitiesResponse{Capabilities: caps, MaxConcurrency: uint32(s.max),
		ActiveJobs: uint32(active), ExecutorVersion: Version,
		Protocols: []string{"session"}}, nil
}

func single(stream grpc.ServerStreamingServer[pb.ExecuteResponse], ev *pb.ExecuteResponse) error {
	ev.Seq = 1
	return stream.Send(ev)
}

// Execute admits a job and streams its events.
func (s *Service) Execute(req *pb.ExecuteRequest,
	stream grpc.ServerStreamingServer[pb.ExecuteResponse]) error {
	job, ev, err := s.admission(req.GetJob())
	if err != nil {
		return err
	}
	if ev != nil {
		return single(stream, ev)
	}
	sent, err := job.out.stream(stream.Context(), stream.Send)
	if !sent {
		// Client disconnect (or a failed send) cancels the job.
		job.requestStop(stopDisconnect, "client disconnected")
		return err
	}
	return nil
}

// admission is Execute's admission order (the package comment), shared with Session: the
// admitted job, or the single event of a job that cannot run, or a refusal (a status error).
func (s *Service) admission(j *pb.Job) (*runningJob, *pb.ExecuteResponse, error) {
	if s.draining.Load() {
		return nil, nil, status.Error(codes.Unavailable, "executor is shutting down")
	}
	// Shape first (required fields, JSON), then whether it is served here.
	spec, jerr := DecodeJob(j)
	var op Operation
	if jerr == nil {
		op, jerr = s.registry.Resolve(spec.Capability)
	}
	if jerr != nil {
		s.log.Info("job refused", "capability", j.GetCapability(), "error", jerr.Message)
		return nil, &pb.ExecuteResponse{Event: &pb.ExecuteResponse_Failed{
			Failed: &pb.JobFailed{Error: jerr.toProto()}}}, nil
	}
	if !spec.Deadline.IsZero() && !spec.Deadline.After(time.Now()) {
		// Retryable, unlike the refusals above: the next attempt gets a fresh deadline.
		return nil, failedEvent(pb.ErrorCode_ERROR_CODE_DEADLINE_EXCEEDED,
			fmt.Sprintf("deadline %s passed before the job started",
				spec.Deadline.Format(time.RFC3339Nano)), true), nil
	}
	job, err := s.admit(spec, op)
	return job, nil, err
}

func (s *Service) admit(spec *Spec, op Operation) (*runningJob, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, dup := s.jobs[spec.key()]; dup {
		return nil, status.Errorf(codes.AlreadyExists,
			"attempt %d of %q is already running here", spec.Attempt, spec.IdempotencyKey)
	}
	if s.active >= s.max {
		return nil, status.Errorf(codes.ResourceExhausted, "executor is full: %d of %d job "+
			"slots busy; retry later or on another executor", s.active, s.max)
	}
	job := newRunningJob(spec, op, s.store, s.cancelGrace, s.log)
	s.jobs[spec.key()] = job
	s.active++
	var release sync.Once
	// The slot is free before the terminal event is put, so before anyone can hear it: a
	// worker that sends the next job as soon as it heard the verdict (a Session) finds it free.
	job.onEnd = func() {
		release.Do(func() {
			s.mu.Lock()
			defer s.mu.Unlock()
			if s.jobs[spec.key()] == job {
				delete(s.jobs, spec.key())
			}
			s.active--
			if s.active == 0 {
				close(s.idle)
				s.idle = make(chan struct{})
			}
		})
	}
	go func() {
		started := time.Now()
		job.run()
		job.onEnd() // a no-op after finish; frees the slot if run ended without a verdict
		job.log.Debug("job ended", "outcome", job.outcome,
			"seconds", time.Since(started).Seconds())
	}()
	return job, nil
}

// Cancel asks a running attempt to stop; its stream ends with cancelled.
func (s *Service) Cancel(_ context.Context, req *pb.CancelRequest) (*pb.CancelResponse, error) {
	s.mu.Lock()
	job := s.jobs[jobKey{req.GetIdempotencyKey(), req.GetAttempt()}]
	s.mu.Unlock()
	if job == nil {
		return &pb.CancelResponse{Found: false}, nil
	}
	reason := req.GetReason()
	if reason == "" {
		reason = "cancel requested"
	}
	job.requestStop(stopCancel, reason)
	return &pb.CancelResponse{Found: true}, nil
}

// waitIdle returns true once no job holds a slot, false if d passed first.
func (s *Service) waitIdle(d time.Duration) bool {
	timer := time.NewTimer(d)
	defer timer.Stop()
	for {
		s.mu.Lock()
		active, idle := s.active, s.idle
		s.mu.Unlock()
		if active == 0 {
			return true
		}
		select {
		case <-idle:
		case <-timer.C:
			return false
		}
	}
}

// Drain refuses new jobs, lets running ones finish for grace, then stops the rest (they
// end with a retryable UNAVAILABLE, so a worker runs them elsewhere).
func (s *Service) Drain(grace time.Duration) {
	s.draining.Store(true)
	s.mu.Lock()
	for ss := range s.sessions {
		ss.drain() // an idle session ends now, a busy one once its jobs have ended
	}
	s.mu.Unlock()
	if s.waitIdle(grace) {
		return
	}
	s.mu.Lock()
	for _, job := range s.jobs {
		job.requestStop(stopShutdown, "")
	}
	s.mu.Unlock()
	// Each job hard-stops its operation after cancelGrace (+1 s for an abandoned one).
	s.waitIdle(s.cancelGrace + 2*time.Second)
}

// Server is a gRPC server with the executor and health services on it.
type Server struct {
	GRPC    *grpc.Server
	Service *Service
	Health  *health.Server
}

// NewServer registers both services; opts carry credentials and interceptors.
func NewServer(service *Service, opts ...grpc.ServerOption) *Server {
	opts = append(opts, grpc.MaxRecvMsgSize(MaxMessageBytes), grpc.MaxSendMsgSize(MaxMessageBytes))
	srv := grpc.NewServer(opts...)
	pb.RegisterExecutorServiceServer(srv, service)
	hs := health.NewServer()
	healthpb.RegisterHealthServer(srv, hs)
	for _, name := range []string{"", pb.ExecutorService_ServiceDesc.ServiceName} {
		hs.SetServingStatus(name, healthpb.HealthCheckResponse_SERVING)
	}
	return &Server{GRPC: srv, Service: service, Health: hs}
}

// Stop is graceful: NOT_SERVING first (load balancers stop sending), drain, then stop the
// server, giving the streams what is left of grace (at least 0.5 s) to flush terminal events.
func (s *Server) Stop(grace time.Duration) {
	started := time.Now()
	s.Health.Shutdown() // every service NOT_SERVING, and it stays so
	s.Service.Drain(grace)
	left := max(500*time.Millisecond, grace-time.Since(started))
	stopped := make(chan struct{})
	go func() {
		s.GRPC.GracefulStop()
		close(stopped)
	}()
	select {
	case <-stopped:
	case <-time.After(left):
		s.GRPC.Stop()
		<-stopped
	}
}
