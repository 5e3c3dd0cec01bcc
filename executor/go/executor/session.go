package executor

import (
	"runtime"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	pb "rara.local/api/gen/go/rara/v1"
)

// sessionBatchBytes bounds one SessionResponse: events that wait together go in one
// message up to this size (a single larger event, such as a big result, goes alone).
const sessionBatchBytes = 1 << 20

// session is one Session stream: its jobs by key, and the events of all of them waiting to
// be sent. Each job's outbox is pumped into that list by its own goroutine, which never
// blocks, so a job whose events are slow holds back no other job's; one writer (the
// handler) sends whatever waits as one batch.
type session struct {
	mu       sync.Mutex
	events   []*pb.SessionEvent
	jobs     map[jobKey]*runningJob
	pumps    int
	reading  bool
	draining bool // the executor drains: end once no job is left (new ones are refused)
	wake     chan struct{}
}

func (ss *session) signal() {
	select {
	case ss.wake <- struct{}{}:
	default:
	}
}

func (ss *session) push(ev *pb.SessionEvent) {
	ss.mu.Lock()
	ss.events = append(ss.events, ev)
	ss.mu.Unlock()
	ss.signal()
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
	ss := &session{jobs: map[jobKey]*runningJob{}, reading: true, wake: make(chan struct{}, 1)}
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
		done := (!ss.reading || ss.draining) && ss.pumps == 0 && len(batch) == 0
		ss.mu.Unlock()
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
				next := proto.Size(batch[n])
				if n > 0 && size+next > sessionBatchBytes {
					break // a big event goes in a message of its own
				}
				size += next
				n++
			}
			if err := stream.Send(&pb.SessionResponse{Events: batch[:n]}); err != nil {
				ss.stopAll("session broke")
				return err
			}
			batch = batch[n:]
		}
	}
}

// readSession admits jobs and applies cancels until the worker's side ends or breaks; then
// every job still on the session stops (the writer flushes their terminal events).
func (s *Service) readSession(stream grpc.BidiStreamingServer[pb.SessionRequest, pb.SessionResponse],
	ss *session) {
	for {
		req, err := stream.Recv()
		if err != nil {
			ss.mu.Lock()
			ss.reading = false
			ss.mu.Unlock()
			ss.stopAll("worker ended the session")
			ss.signal()
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
	job, ev, err := s.admission(j)
	if err != nil {
		st := status.Convert(err)
		ss.push(&pb.SessionEvent{IdempotencyKey: key.idempotencyKey, Attempt: key.attempt,
			StepId: j.GetStepId(), Body: &pb.SessionEvent_Refused{Refused: &pb.JobRefused{
				StatusCode: uint32(st.Code()), Message: st.Message()}}})
		return
	}
	if ev != nil {
		ev.Seq = 1
		ss.push(tag(ev))
		return
	}
	ss.mu.Lock()
	ss.jobs[key] = job
	ss.pumps++
	ss.mu.Unlock()
	go func() {
		sent, _ := job.out.stream(stream.Context(), func(ev *pb.ExecuteResponse) error {
			ss.push(tag(ev))
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
