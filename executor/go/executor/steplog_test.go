package executor

import (
	"strings"
	"testing"
	"time"

	pb "rara.local/api/gen/go/rara/v1"
)

// logsOf drains the outbox's queued events: the JobLog ones, in order.
func logsOf(t *testing.T, o *outbox) []*pb.JobLog {
	t.Helper()
	o.mu.Lock()
	defer o.mu.Unlock()
	var logs []*pb.JobLog
	for _, it := range o.items {
		if it.event != nil {
			if l := it.event.GetLog(); l != nil {
				logs = append(logs, l)
			}
		}
	}
	return logs
}

func TestStepLogSendsWholeLinesMaskedAndEverythingAtTheEnd(t *testing.T) {
	o := newOutbox(time.Millisecond)
	l := newStepLog(o)
	l.write([]byte("loading\nhalf a li"))
	l.write([]byte("ne with token=ghp_abcdefghijklmnopqrstuvwxyz0123456789\n"))
	l.write([]byte("no newline"))
	deadline := time.Now().Add(5 * time.Second)
	for len(logsOf(t, o)) == 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond) // the period's timer, on its own goroutine
	}
	live := logsOf(t, o)
	if len(live) != 1 || strings.Contains(live[0].Text, "no newline") {
		t.Fatalf("while running only whole lines go out: %v", live)
	}
	if strings.Contains(live[0].Text, "ghp_") || !strings.Contains(live[0].Text, Mask) {
		t.Fatalf("a credential is masked before it leaves: %q", live[0].Text)
	}
	l.end()
	all := logsOf(t, o)
	if got := all[len(all)-1].Text; got != "no newline" {
		t.Fatalf("the rest goes out at the end: %q", got)
	}
	l.write([]byte("after the end"))
	if n := len(logsOf(t, o)); n != len(all) {
		t.Fatalf("nothing is sent after the end: %d events, was %d", n, len(all))
	}
}

func TestStepLogKeepsHeadAndTailAndCountsWhatItDropped(t *testing.T) {
	o := newOutbox(time.Millisecond)
	l := newStepLog(o)
	line := strings.Repeat("x", 99) + "\n" // 100 bytes
	total := 0
	for total < 3*1024*1024 {
		l.write([]byte(line))
		total += len(line)
	}
	l.end()
	var sent, dropped int
	var droppedSeen int
	for _, e := range logsOf(t, o) {
		if len(e.Text) > logChunkBytes {
			t.Fatalf("an event holds at most a chunk: %d bytes", len(e.Text))
		}
		sent += len(e.Text)
		if e.Dropped > 0 {
			droppedSeen++
			dropped += int(e.Dropped)
		}
	}
	if droppedSeen != 1 {
		t.Fatalf("the drop is said once, before the tail: %d times", droppedSeen)
	}
	if sent+dropped != total {
		t.Fatalf("sent %d + dropped %d != written %d", sent, dropped, total)
	}
	if sent > logHeadBytes+logTailBytes || sent < logHeadBytes+logTailBytes-len(line) {
		t.Fatalf("head and tail kept: %d bytes sent", sent)
	}
}
