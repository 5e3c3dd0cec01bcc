package executor

import (
	"context"
	"sync"
	"time"

	pb "rara.local/api/gen/go/rara/v1"
)

// outbox is the ordered channel from a running job to its Execute stream. Producers are the
// job and its operation's goroutines; the single consumer (stream) numbers events as it sends
// them, so seq strictly increases by construction, and everything put before the terminal
// event is sent before it.
//
// Progress is coalesced: one slot holds the latest update and at most one marker for it sits
// in the queue (where the first update since the last send arrived), so a flood costs O(1)
// and the newest state is what goes out. Progress events are spaced progressInterval apart
// (each is a database write on the worker), unless another event waits behind the marker.
type outbox struct {
	mu             sync.Mutex
	items          []outItem
	latest         *pb.JobProgress
	progressQueued bool
	closed         bool // a terminal event was put; later puts are dropped
	detached       bool // the consumer is gone; nothing will be sent any more
	wake           chan struct{}
	interval       time.Duration
}

type outItem struct {
	event    *pb.ExecuteResponse // nil: the coalesced-progress marker
	written  chan struct{}       // closed once the event was handed to gRPC (or never will be)
	terminal bool
}

func newOutbox(interval time.Duration) *outbox {
	return &outbox{wake: make(chan struct{}, 1), interval: interval}
}

func isTerminal(ev *pb.ExecuteResponse) bool {
	switch ev.GetEvent().(type) {
	case *pb.ExecuteResponse_Succeeded, *pb.ExecuteResponse_Failed, *pb.ExecuteResponse_Cancelled:
		return true
	}
	return false
}

func (o *outbox) signal() {
	select {
	case o.wake <- struct{}{}:
	default:
	}
}

// put queues an event; a terminal one closes the outbox. written (may be nil) is closed
// once the event was sent, or at once when it never will be. Reports false if dropped.
func (o *outbox) put(ev *pb.ExecuteResponse, written chan struct{}) bool {
	o.mu.Lock()
	if o.closed || o.detached {
		o.mu.Unlock()
		if written != nil {
			close(written)
		}
		return false
	}
	terminal := isTerminal(ev)
	o.closed = o.closed || terminal
	o.items = append(o.items, outItem{event: ev, written: written, terminal: terminal})
	o.mu.Unlock()
	o.signal()
	return true
}

// putProgress replaces the pending progress update; queues a marker if none is.
func (o *outbox) putProgress(p *pb.JobProgress) {
	o.mu.Lock()
	if o.closed || o.detached {
		o.mu.Unlock()
		return
	}
	o.latest = p
	if o.progressQueued {
		o.mu.Unlock()
		return
	}
	o.progressQueued = true
	o.items = append(o.items, outItem{})
	o.mu.Unlock()
	o.signal()
}

// stream sends events until the terminal one (true) or until ctx ends or send fails.
func (o *outbox) stream(ctx context.Context, send func(*pb.ExecuteResponse) error) (bool, error) {
	defer o.detach()
	var seq uint64
	var nextProgress time.Time
	for {
		o.mu.Lock()
		if len(o.items) == 0 {
			o.mu.Unlock()
			select {
			case <-o.wake:
				continue
			case <-ctx.Done():
				return false, ctx.Err()
			}
		}
		it := o.items[0]
		if it.event == nil && len(o.items) == 1 {
			if wait := time.Until(nextProgress); wait > 0 {
				o.mu.Unlock()
				timer := time.NewTimer(wait)
				select {
				case <-timer.C:
				case <-o.wake:
					timer.Stop()
				case <-ctx.Done():
					timer.Stop()
					return false, ctx.Err()
				}
				continue
			}
		}
		o.items = o.items[1:]
		ev := it.event
		if ev == nil {
			if o.latest != nil {
				ev = &pb.ExecuteResponse{Event: &pb.ExecuteResponse_Progress{Progress: o.latest}}
			}
			o.latest, o.progressQueued = nil, false
		}
		o.mu.Unlock()
		if ev == nil {
			continue
		}
		seq++
		ev.Seq = seq
		err := send(ev)
		if it.written != nil {
			close(it.written)
		}
		if err != nil {
			return false, err
		}
		if it.event == nil {
			nextProgress = time.Now().Add(o.interval)
		}
		if it.terminal {
			return true, nil
		}
	}
}

// detach: the consumer is gone; wake every producer waiting for a write.
func (o *outbox) detach() {
	o.mu.Lock()
	o.detached = true
	items := o.items
	o.items = nil
	o.mu.Unlock()
	for _, it := range items {
		if it.written != nil {
			close(it.written)
		}
	}
}
