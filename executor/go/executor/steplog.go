package executor

import (
	"bytes"
	"fmt"
	"io"
	"sync"
	"time"
	"unicode/utf8"

	pb "rara.local/api/gen/go/rara/v1"
)

// The bound of an attempt's log, the Python executor's (rara.step_output): the first
// logHeadBytes go out while the operation runs, the last logTailBytes just before the
// terminal event, and what falls between is counted in the dropped field of the event that
// follows it. An event holds at most logChunkBytes; a line is held until its newline, the
// chunk's size, or the job's end, so that masking sees it whole.
const (
	logHeadBytes  = 512 * 1024
	logTailBytes  = 512 * 1024
	logChunkBytes = 64 * 1024
	logPeriod     = 500 * time.Millisecond // between events while less than a chunk waits
)

// stepLog is what an operation writes (Job.Log, Job.Logf, Job.LogWriter), on its way to the
// job's outbox as JobLog events, masked (Redact) and bounded.
type stepLog struct {
	mu       sync.Mutex
	out      *outbox
	headLeft int    // head bytes still to take
	pending  []byte // taken into the head, not yet sent
	tail     []byte // past the head: the newest bytes, at most logTailBytes
	dropped  uint64 // past the head and out of the tail: said with the tail's first event
	timer    *time.Timer
	ended    bool
}

func newStepLog(out *outbox) *stepLog {
	return &stepLog{out: out, headLeft: logHeadBytes}
}

// write takes text from the operation (any goroutine).
func (l *stepLog) write(text []byte) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.ended || len(text) == 0 {
		return
	}
	if n := min(len(text), l.headLeft); n > 0 {
		l.pending = append(l.pending, text[:n]...)
		l.headLeft -= n
		text = text[n:]
	}
	if len(text) > 0 {
		l.tail = append(l.tail, text...)
		if over := len(l.tail) - logTailBytes; over > 0 {
			l.dropped += uint64(over)
			l.tail = append(l.tail[:0], l.tail[over:]...)
		}
	}
	for len(l.pending) >= logChunkBytes {
		l.send(l.cut(logChunkBytes), 0)
	}
	if len(l.pending) > 0 && l.timer == nil {
		l.timer = time.AfterFunc(logPeriod, l.tick)
	}
}

func (l *stepLog) tick() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.timer = nil
	if l.ended {
		return
	}
	// Whole lines only while the job runs; a line longer than a chunk went out above.
	if i := bytes.LastIndexByte(l.pending, '\n'); i >= 0 {
		l.send(l.cut(i+1), 0)
	}
	if len(l.pending) > 0 {
		l.timer = time.AfterFunc(logPeriod, l.tick)
	}
}

// end sends everything left, the tail last, before the terminal event is put.
func (l *stepLog) end() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.ended {
		return
	}
	l.ended = true
	if l.timer != nil {
		l.timer.Stop()
	}
	for len(l.pending) > 0 {
		l.send(l.cut(logChunkBytes), 0)
	}
	tail, dropped := l.tail, l.dropped
	if dropped > 0 {
		// Cut where a line starts, as the Python bound does: a masked secret is never halved.
		if i := bytes.IndexByte(tail, '\n'); i >= 0 && i+1 < len(tail) {
			dropped += uint64(i + 1)
			tail = tail[i+1:]
		}
	}
	for len(tail) > 0 {
		n := runeCut(tail, logChunkBytes)
		l.send(tail[:n], dropped)
		tail, dropped = tail[n:], 0
	}
	if dropped > 0 { // everything past the head was dropped: say so all the same
		l.send(nil, dropped)
	}
}

// cut takes up to n bytes off the front of pending, never through a character.
func (l *stepLog) cut(n int) []byte {
	n = runeCut(l.pending, n)
	piece := bytes.Clone(l.pending[:n])
	l.pending = append(l.pending[:0], l.pending[n:]...)
	return piece
}

func (l *stepLog) send(text []byte, dropped uint64) {
	masked := Redact(string(bytes.ToValidUTF8(text, []byte("\uFFFD"))))
	l.out.put(&pb.ExecuteResponse{Event: &pb.ExecuteResponse_Log{Log: &pb.JobLog{
		Text: masked, Dropped: dropped}}}, nil)
}

// runeCut is the largest length ≤ n of data that ends on a character's boundary.
func runeCut(data []byte, n int) int {
	if n >= len(data) {
		return len(data)
	}
	for i := n; i > n-utf8.UTFMax && i > 0; i-- {
		if utf8.RuneStart(data[i]) {
			return i
		}
	}
	return n
}

// Log writes text to the attempt's log (the worker stores it; `rara runs logs` and the
// dashboard show it), masked and bounded like a Python step's output.
func (j *Job) Log(text string) {
	if j.rj != nil {
		j.rj.output.write([]byte(text))
	}
}

// Logf is Log with a format; a newline ends the line.
func (j *Job) Logf(format string, args ...any) {
	j.Log(fmt.Sprintf(format, args...) + "\n")
}

// LogWriter is the attempt's log as an io.Writer, for log.New or slog.NewTextHandler.
func (j *Job) LogWriter() io.Writer {
	return jobLogWriter{j}
}

type jobLogWriter struct{ job *Job }

func (w jobLogWriter) Write(p []byte) (int, error) {
	w.job.Log(string(p))
	return len(p), nil
}
