package ops

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"rara.local/executor/go/executor"
)

// The field smoke's operation (tests/e2e/test_mixed_fleet_smoke.py): chaos.shard-go@1 does
// what the Python executor's chaos.shard@1 does (tests/e2e/chaos/plugins.py), with the same
// file ledger, so the restart smoke's invariants (tests/e2e/chaos/invariants.py) read both:
// progress once per chunk, a checkpoint per chunk with "checkpoint": true (resuming from the
// last one), one effect per idempotency key in $RARA_CHAOS_FILE_LEDGER as the file
// "<key>.<attempt>" holding "<pid> <unix time>" (check-then-link: two owners at once would
// leave two files, a duplicate the checker counts), and one artifact "<step key>.txt".

// RegisterChaos adds chaos.shard-go@1.
func RegisterChaos(r *executor.Registry) {
	r.MustRegister(executor.Operation{Name: "chaos.shard-go", Major: 1, Run: chaosShard})
}

func chaosEffect(job *executor.Job) (bool, error) {
	if job.Cancelled() {
		return false, executor.Failed("stopped before the effect", true)
	}
	ledger := os.Getenv("RARA_CHAOS_FILE_LEDGER")
	if ledger == "" {
		return false, executor.Failed("RARA_CHAOS_FILE_LEDGER is not set", false)
	}
	entries, err := os.ReadDir(ledger)
	if err != nil {
		return false, err
	}
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), job.IdempotencyKey+".") {
			return false, nil // an earlier attempt did it
		}
	}
	// Whole or not at all, even under SIGKILL: a temporary file, linked to its name.
	tmp := filepath.Join(ledger, fmt.Sprintf(".tmp-%d.%d", os.Getpid(), time.Now().UnixNano()))
	now := float64(time.Now().UnixMicro()) / 1e6
	if err := os.WriteFile(tmp, fmt.Appendf(nil, "%d %.6f\n", os.Getpid(), now), 0o644); err != nil {
		return false, err
	}
	defer os.Remove(tmp)
	path := filepath.Join(ledger, fmt.Sprintf("%s.%d", job.IdempotencyKey, job.Attempt))
	if err := os.Link(tmp, path); errors.Is(err, fs.ErrExist) {
		return false, nil // this very attempt did it (link refuses an existing name)
	} else if err != nil {
		return false, err
	}
	return true, nil
}

func chaosShard(ctx context.Context, job *executor.Job) (*executor.Outcome, error) {
	chunksF, err := number(job.Input, "chunks", 5)
	if err != nil {
		return nil, err
	}
	seconds, err := number(job.Input, "seconds", 0.5)
	if err != nil {
		return nil, err
	}
	chunks, checkpointing := int(chunksF), boolean(job.Input, "checkpoint")
	start := 0
	if checkpointing && job.Checkpoint != nil {
		next, err := number(job.Checkpoint.State, "next", 0)
		if err != nil {
			return nil, err
		}
		start = int(next)
	}
	tick := time.Duration(seconds / float64(max(chunks, 1)) * float64(time.Second))
	for i := start; i < chunks; i++ {
		select {
		case <-time.After(tick):
		case <-job.Stopping():
			return nil, executor.Failed("stopped", true)
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		job.Progress(float64(i+1)/float64(chunks), fmt.Sprintf("chunk %d/%d", i+1, chunks),
			map[string]float64{"chunk": float64(i + 1)})
		if checkpointing {
			if err := job.SaveCheckpoint(map[string]any{"next": i + 1}, nil); err != nil {
				return nil, err
			}
		}
	}
	effect, err := chaosEffect(job)
	if err != nil {
		return nil, err
	}
	ref, err := job.Store.PutBytes([]byte(job.IdempotencyKey+"\n"), "text/plain")
	if err != nil {
		return nil, err
	}
	return &executor.Outcome{
		Result: map[string]any{"key": job.IdempotencyKey, "attempt": job.Attempt,
			"effect": effect, "resumed_from": start},
		Artifacts: []executor.OutputArtifact{{Name: job.StepKey + ".txt", Ref: ref,
			MediaType: "text/plain"}},
	}, nil
}
