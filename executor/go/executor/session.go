package executor

import (
	"context"
	"runtime"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	pb "rara.local/api/gen/go/rara/v1"
)

// sessionBatchBytes bounds one SessionResponse: events that wait together go in one
// message up to this size (a single larger event, such as a big result, goes alone).
const sessionBatchBytes = 1 << 20

// The bounds of one Session (the same as rara/executor/limits.py's).
const (
	// MaxSessionJobsPerMessage: a SessionRequest carrying more jobs ends the session with
	// INVALID_ARGUMENT naming the limit (clients split their batches at it).
	MaxSessionJobsPerMessage = 1000
	// SessionQueueEvents and SessionQueueBytes bound the events a session holds for its
	// worker, waiting or being sent: while either is reached, jobs' events wait in their own
	// outboxes (a SaveCheckpoint waits with them) and no further request is read from the
	// stream, so a worker that stops reading answers is stopped by gRPC flow control instead
	// of growing the executor's memory. A single event larger than the byte bound still goes
	// when nothing else waits.
	SessionQueueEvents = 1024
	SessionQueueBytes  = MaxMessageBytes
)

// queued is an event waiting for the session's writer, with its size on the wire.
type queued struct {
	event *pb.SessionEvent
	size  int
}

// session is one Session stream: its jobs by key, and the events of all of them waiting to
// be sent, bounded (SessionQueueEvents, SessionQueueBytes). Each job's outbox is pumped into
// that queue by its own goroutine, which waits only for room in it, so a job whose events are
// slow holds back no other job's; one writer (the handler) sends whatever waits as one batch.
type session struct {
	mu       sync.Mutex
	events   []queued
	held     int           // events queued or being sent
	bytes    int           // their size
	pushers  int           // producers waiting for room
	readers  int           // the reader, waiting for room before it reads the next request
	room     chan struct{} // closed and replaced when room is made and someone waits for it
	jobs     map[jobKey]*runningJob
	pumps    int
	reading  bool
	draining bool  // the executor drains: end once no job is left (new ones are refused)
	refusal  error // the worker broke the contract: the session ends with this status
	wake     chan struct{}
}

func newSession() *session {
	return &session{jobs: map[jobKey]*runningJob{}, reading: true, wake: make(chan struct{}, 1),
		room: make(chan struct{})}
}

func (ss *session) signal() {
	select {
	case ss.wake <- struct{}{}:
	default:
	}
}

// full: the queue is at a bound (the caller holds mu).
func (ss *session) full() bool {
	return ss.held >= SessionQueueEvents || ss.bytes >= SessionQueueBytes
}

// waitRoom waits (mu held, and held again on return) until ready() or ctx ends (false).
func (ss *session) waitRoom(ctx context.Context, count *int, ready func() bool) bool {
	for !ready() {
		room := ss.room
		*count++
		ss.mu.Unlock()
		select {
		case <-room:
		case <-ctx.Done():
		}
		ss.mu.Lock()
		*count--
		if ctx.Err() != nil {
			return false
		}
	}
	return true
}

// push queues an event, waiting while the queue is full (an empty queue takes any event);
// false if the stream ended first (nothing will be sent any more).
func (ss *session) push(ctx context.Context, ev *pb.SessionEvent) bool {
	size := proto.Size(ev)
	ss.mu.Lock()
	if !ss.waitRoom(ctx, &ss.pushers, func() bool { return ss.held == 0 || !ss.full() }) {
		ss.mu.Unlock()
		return false
	}
	ss.events = append(ss.events, queued{ev, size})
	ss.held++
	ss.bytes += size
	ss.mu.Unlock()
	ss.signal()
	return true
}

// readable waits until the reader may take the next request: the queue is below its bounds
// and no job waits to put an event (they go first). False if the stream ended first.
func (ss *session) readable(ctx context.Context) bool {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	return ss.waitRoom(ctx, &ss.readers, func() bool { return !ss.full() && ss.pushers == 0 })
}

// sent: the writer handed n events of size bytes to gRPC; wake whoever waits for room.
func (ss *session) sent(n, size int) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	ss.held -= n
	ss.bytes -= size
	if ss.pushers+ss.readers > 0 && !ss.full() {
		close(ss.room)
		ss.room = make(chan struct{})
	}
}

// drain: the executor is shutting down; the session ends (OK) once no job is left on it.
func (ss *session) drain() {
	ss.mu.Lock()
	ss.draining = true
	ss.mu.Unlock()
	ss.signal()
}

// stopAll stops every job still on the session, as a client disconnect stops an Execute job.
func (ss *session) stopAll(reason string) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	for _, job := range ss.jobs {
		job.requestStop(stopDisconnect, reason)
	}
}

// Session serves many jobs on one stream, each with Execute's semantics; a refusal that
// would fail an Execute call with a status refuses only that job (JobRefused).
func (s *Service) Session(stream grpc.BidiStreamingServer[pb.SessionRequest, pb.SessionResponse]) error {
	ctx := stream.Context()
	ss := newSession()
	s.mu.Lock()
	s.sessions[ss] = struct{}{}
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.sessions, ss)
		s.mu.Unlock()
	}()
	if s.draining.Load() {
		ss.drain()
	}
	go s.readSession(stream, ss)
	for {
		// Let the jobs that are running put what they have (a no-op job's three events come
		// in quick succession): one Send for all of it costs a fraction of one Send each.
		runtime.Gosched()
		ss.mu.Lock()
		batch := ss.events
		ss.events = nil
		refusal := ss.refusal
		done := (!ss.reading || ss.draining) && ss.pumps == 0 && len(batch) == 0
		ss.mu.Unlock()
		if refusal != nil {
			ss.stopAll("session refused")
			return refusal
		}
		if done {
			return nil
		}
		if len(batch) == 0 {
			select {
			case <-ss.wake:
				continue
			case <-ctx.Done():
				ss.stopAll("session broke")
				return ctx.Err()
			}
		}
		for len(batch) > 0 {
			n, size := 0, 0
			for n < len(batch) {
				next := batch[n].size
				if n > 0 && size+next > sessionBatchBytes {
					break // a big event goes in a message of its own
				}
				size += next
				n++
			}
			events := make([]*pb.SessionEvent, n)
			for i, q := range batch[:n] {
				events[i] = q.event
			}
			if err := stream.Send(&pb.SessionResponse{Events: events}); err != nil {
				ss.stopAll("session broke")
				return err
			}
			ss.sent(n, size)
			batch = batch[n:]
		}
	}
}

// readSession admits jobs and applies cancels until the worker's side ends or breaks; then
// every job still on the session stops (the writer flushes their terminal events).
func (s *Service) readSession(stream grpc.BidiStreamingServer[pb.SessionRequest, pb.SessionResponse],
	ss *session) {
	ctx := stream.Context()
	end := func(refusal error, why string) {
		ss.mu.Lock()
		ss.reading = false
		ss.refusal = refusal
		ss.mu.Unlock()
		ss.stopAll(why)
		ss.signal()
	}
	for {
		// Backpressure: while the worker has not read what waits for it, read nothing more.
		if !ss.readable(ctx) {
			end(nil, "session broke")
			return
		}
		req, err := stream.Recv()
		if err != nil {
			end(nil, "worker ended the session")
			return
		}
		if n := len(req.GetJobs()); n > MaxSessionJobsPerMessage {
			end(status.Errorf(codes.InvalidArgument, "a SessionRequest carries %d jobs; the "+
				"limit is %d jobs per message (send the rest in further messages)", n,
				MaxSessionJobsPerMessage), "session refused")
			return
		}
		for _, j := range req.GetJobs() {
			s.startInSession(stream, ss, j)
		}
		for _, c := range req.GetCancels() {
			ss.mu.Lock()
			job := ss.jobs[jobKey{c.GetIdempotencyKey(), c.GetAttempt()}]
			ss.mu.Unlock()
			if job != nil {
				reason := c.GetReason()
				if reason == "" {
					reason = "cancel requested"
				}
				job.requestStop(stopCancel, reason)
			}
		}
	}
}

func (s *Service) startInSession(stream grpc.BidiStreamingServer[pb.SessionRequest, pb.SessionResponse],
	ss *session, j *pb.Job) {
	key := jobKey{j.GetIdempotencyKey(), j.GetAttempt()}
	tag := func(ev *pb.ExecuteResponse) *pb.SessionEvent {
		return &pb.SessionEvent{IdempotencyKey: key.idempotencyKey, Attempt: key.attempt,
			StepId: j.GetStepId(), Body: &pb.SessionEvent_Event{Event: ev}}
	}
	ctx := stream.Context()
	job, ev, err := s.admission(j)
	if err != nil {
		st := status.Convert(err)
		ss.push(ctx, &pb.SessionEvent{IdempotencyKey: key.idempotencyKey, Attempt: key.attempt,
			StepId: j.GetStepId(), Body: &pb.SessionEvent_Refused{Refused: &pb.JobRefused{
				StatusCode: uint32(st.Code()), Message: st.Message()}}})
		return
	}
	if ev != nil {
		ev.Seq = 1
		ss.push(ctx, tag(ev))
		return
	}
	ss.mu.Lock()
	ss.jobs[key] = job
	ss.pumps++
	ss.mu.Unlock()
	go func() {
		sent, _ := job.out.stream(ctx, func(ev *pb.ExecuteResponse) error {
			if !ss.push(ctx, tag(ev)) {
				return ctx.Err()
			}
			return nil
		})
		if !sent {
			job.requestStop(stopDisconnect, "session broke")
		}
		ss.mu.Lock()
		if ss.jobs[key] == job {
			delete(ss.jobs, key)
		}
		ss.pumps--
		ss.mu.Unlock()
		ss.signal()
	}()
}
