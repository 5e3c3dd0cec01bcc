package ops

import (
	"context"
	"fmt"
	"time"

	"rara.local/executor/go/executor"
)

// The probes of `rara executor-conformance`, with the names and behaviour of the Python
// reference (rara/executor/conformance_plugins.py): test.echo@1 (order, checkpoints,
// artifacts), test.sleep@1 (progress, deadline, cancel, disconnect, admission), test.hang@1
// (hard stop), test.fail@1 (structured errors). They do no real work.

// RegisterConformance adds the four probes.
func RegisterConformance(r *executor.Registry) {
	r.MustRegister(executor.Operation{Name: "test.echo", Major: 1, Run: echo})
	r.MustRegister(executor.Operation{Name: "test.sleep", Major: 1, Run: sleep})
	r.MustRegister(executor.Operation{Name: "test.hang", Major: 1, Run: hang})
	r.MustRegister(executor.Operation{Name: "test.fail", Major: 1, Run: fail})
}

// echo returns what the job carried; payload "log" (string) is written to the attempt's log
// first, "checkpoint" (object) is saved as a checkpoint, "artifact_text" (string) is stored
// and returned as artifact echo.txt.
func echo(_ context.Context, job *executor.Job) (*executor.Outcome, error) {
	if text, ok := job.Input["log"].(string); ok {
		job.Log(text)
	}
	if state, ok := job.Input["checkpoint"].(map[string]any); ok {
		if err := job.SaveCheckpoint(state, nil); err != nil {
			return nil, err
		}
	}
	var arts []executor.OutputArtifact
	if text, ok := job.Input["artifact_text"].(string); ok {
		ref, err := job.Store.PutBytes([]byte(text), "text/plain")
		if err != nil {
			return nil, err
		}
		arts = append(arts, executor.OutputArtifact{Name: "echo.txt", Ref: ref,
			MediaType: "text/plain"})
	}
	inputs := map[string]string{}
	for name, ref := range job.Inputs {
		inputs[name] = ref.Digest
	}
	var resumed any
	if job.Checkpoint != nil {
		resumed = job.Checkpoint.State
	}
	return &executor.Outcome{Result: map[string]any{
		"input": job.Input, "attempt": job.Attempt, "idempotency_key": job.IdempotencyKey,
		"step_key": job.StepKey, "inputs": inputs, "resumed_from": resumed,
	}, Artifacts: arts}, nil
}

// sleep sleeps "seconds" in "steps" ticks, reporting progress after each; it honours a stop
// request within 20 ms unless "ignore_cancel" (then only the hard stop ends it).
func sleep(ctx context.Context, job *executor.Job) (*executor.Outcome, error) {
	seconds, err := number(job.Input, "seconds", 1)
	if err != nil {
		return nil, err
	}
	stepsF, err := number(job.Input, "steps", 10)
	if err != nil {
		return nil, err
	}
	steps := max(1, int(stepsF))
	ignore := boolean(job.Input, "ignore_cancel")
	stopping := job.Stopping()
	if ignore {
		stopping = nil
	}
	started := time.Now()
	total := time.Duration(seconds * float64(time.Second))
	for i := range steps {
		ends := started.Add(total * time.Duration(i+1) / time.Duration(steps))
		timer := time.NewTimer(time.Until(ends))
		select {
		case <-timer.C:
		case <-stopping:
			timer.Stop()
			return &executor.Outcome{Result: map[string]any{"completed_steps": i,
				"stopped": true}}, nil
		case <-ctx.Done():
			timer.Stop()
			return nil, ctx.Err()
		}
		job.Progress(float64(i+1)/float64(steps), fmt.Sprintf("step %d/%d", i+1, steps),
			map[string]float64{"step": float64(i + 1)})
	}
	return &executor.Outcome{Result: map[string]any{"completed_steps": steps,
		"stopped": false}}, nil
}

// hang is deaf to the stop request: only the hard stop (ctx) ends it.
func hang(ctx context.Context, job *executor.Job) (*executor.Outcome, error) {
	job.Progress(0, "hanging", nil)
	seconds, err := number(job.Input, "seconds", 3600)
	if err != nil {
		return nil, err
	}
	select {
	case <-time.After(time.Duration(seconds * float64(time.Second))):
		return &executor.Outcome{Result: map[string]any{"hung": false}}, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// fail returns a structured error; "retryable" and "message" come from the payload.
func fail(_ context.Context, job *executor.Job) (*executor.Outcome, error) {
	err := executor.Failed(str(job.Input, "message", "test.fail failed as asked"),
		boolean(job.Input, "retryable"))
	err.Details = map[string]string{"plugin": "test.fail"}
	return nil, err
}
