// Command river-bench drains no-op River jobs (or times an idle client's wake-up) on a
// PostgreSQL database, for rara's peer comparison (bench/peers). It is built from River's
// library modules, river and riverdriver/riverpgxv5: River's own `river bench` is a command of
// a module that is not published, so this driver does what it does in the way it does it:
// N jobs inserted with InsertMany in batches of 5,000 (not timed), then one client started
// with River's benchmark settings (FetchCooldown 2 ms, FetchPollInterval 20 ms, 2,000
// workers), completions counted from the client's event subscription, the drain timed from
// the client's start to the last completion event.
//
//	river-bench -dsn URL -jobs N             drain: N no-op jobs
//	river-bench -dsn URL -jobs M -latency    insert → Work() of an idle client, one job at a time
//
// The database must be empty; River's schema is migrated into it first. The driver prints
// "ready" on stdout once set up, waits for a line on stdin (the caller samples CPU counters
// meanwhile), runs the timed part and prints one JSON object on stdout; a drain's includes the
// driver's own CPU seconds over it (getrusage).
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"runtime/debug"
	"sort"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"
)

const (
	insertBatch = 5_000
	maxWorkers  = 2_000 // River's benchmark: ~1k-2k goroutines worked best for its authors
	warmup      = 5
)

// pgx5Tx is the transaction type of River's pgx v5 driver: the client's type parameter.
type pgx5Tx = pgx.Tx

// noopArgs is the job: its number, so that a latency sample knows its own job.
type noopArgs struct {
	Num int `json:"num"`
}

func (noopArgs) Kind() string { return "noop" }

// noopWorker does nothing, or stamps when it started (latency mode).
type noopWorker struct {
	river.WorkerDefaults[noopArgs]
	starts chan<- stamp
}

type stamp struct {
	num int
	at  time.Time
}

func (w *noopWorker) Work(_ context.Context, job *river.Job[noopArgs]) error {
	if w.starts != nil {
		w.starts <- stamp{job.Args.Num, time.Now()}
	}
	return nil
}

func main() {
	dsn := flag.String("dsn", "", "postgresql:// URL of an empty database")
	jobs := flag.Int("jobs", 50_000, "jobs to drain (latency: samples)")
	latency := flag.Bool("latency", false, "wake-up latency of an idle client instead of a drain")
	timeout := flag.Duration("timeout", 300*time.Second, "bound on the timed part")
	flag.Parse()
	if err := run(*dsn, *jobs, *latency, *timeout); err != nil {
		fmt.Fprintln(os.Stderr, "river-bench:", err)
		os.Exit(1)
	}
}

func run(dsn string, jobs int, latency bool, timeout time.Duration) error {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, dsn)
	if err != nil {
		return err
	}
	defer pool.Close()
	driver := riverpgxv5.New(pool)
	migrator, err := rivermigrate.New(driver, nil)
	if err != nil {
		return err
	}
	if _, err := migrator.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	var starts chan stamp
	if latency {
		starts = make(chan stamp, 16)
	}
	workers := river.NewWorkers()
	river.AddWorker(workers, &noopWorker{starts: starts})
	client, err := river.NewClient(driver, &river.Config{
		FetchCooldown:     2 * time.Millisecond,
		FetchPollInterval: 20 * time.Millisecond,
		Queues:            map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: maxWorkers}},
		Workers:           workers,
	})
	if err != nil {
		return err
	}
	var result map[string]any
	if latency {
		result, err = measureLatency(ctx, client, starts, jobs, timeout)
	} else {
		result, err = drain(ctx, pool, client, jobs, timeout)
	}
	if err != nil {
		return err
	}
	result["peer"] = "river"
	result["versions"] = versions()
	return json.NewEncoder(os.Stdout).Encode(result)
}

// released says "ready" and waits for the caller's line on stdin.
func released() error {
	fmt.Println("ready")
	if _, err := bufio.NewReader(os.Stdin).ReadString('\n'); err != nil {
		return fmt.Errorf("waiting for the release: %w", err)
	}
	return nil
}

func drain(ctx context.Context, pool *pgxpool.Pool, client *river.Client[pgx5Tx], jobs int,
	timeout time.Duration) (map[string]any, error) {
	params := make([]river.InsertManyParams, 0, insertBatch)
	for i := 0; i < jobs; i += insertBatch {
		params = params[:0]
		for j := i; j < min(i+insertBatch, jobs); j++ {
			params = append(params, river.InsertManyParams{Args: noopArgs{Num: j}})
		}
		if _, err := client.InsertMany(ctx, params); err != nil {
			return nil, fmt.Errorf("insert: %w", err)
		}
	}
	if _, err := pool.Exec(ctx, "ANALYZE"); err != nil {
		return nil, err
	}
	// Completions from the client's events: they come after the completer wrote them (a
	// worker returning is not yet a completion). Large enough never to drop an event.
	events, cancel := client.SubscribeConfig(&river.SubscribeConfig{
		ChanSize: jobs + 1,
		Kinds: []river.EventKind{river.EventKindJobCompleted, river.EventKindJobFailed,
			river.EventKindJobCancelled},
	})
	defer cancel()
	if err := released(); err != nil {
		return nil, err
	}
	start, cpu := time.Now(), cpuSeconds()
	if err := client.Start(ctx); err != nil {
		return nil, err
	}
	deadline := time.After(timeout)
	var last time.Time
	for done := 0; done < jobs; done++ {
		select {
		case event := <-events:
			if event.Kind != river.EventKindJobCompleted {
				return nil, fmt.Errorf("job %d: %s", event.Job.ID, event.Kind)
			}
			last = time.Now()
		case <-deadline:
			return nil, fmt.Errorf("%d of %d jobs completed in %s", done, jobs, timeout)
		}
	}
	seconds, cpu := last.Sub(start).Seconds(), cpuSeconds()-cpu
	if err := stop(ctx, client); err != nil {
		return nil, err
	}
	var completed, left int
	if err := pool.QueryRow(ctx, "SELECT count(*) FILTER (WHERE state = 'completed'), "+
		"count(*) FILTER (WHERE state <> 'completed') FROM river_job").Scan(&completed, &left); err != nil {
		return nil, err
	}
	if completed != jobs || left != 0 {
		return nil, fmt.Errorf("%d of %d jobs completed in the database, %d left", completed, jobs, left)
	}
	return map[string]any{
		"mode": "drain", "jobs": jobs, "workers": 1, "max_workers": maxWorkers,
		"seconds": round(seconds, 4), "jobs_per_s": round(float64(jobs)/seconds, 1),
		"completed_in_db": completed, "cpu_seconds": round(cpu, 4),
	}, nil
}

// measureLatency: an idle, started client; each job inserted 20 ms after the previous one
// started (as the other peers are measured), timed from before the insert to Work().
func measureLatency(ctx context.Context, client *river.Client[pgx5Tx], starts <-chan stamp,
	samples int, timeout time.Duration) (map[string]any, error) {
	if err := client.Start(ctx); err != nil {
		return nil, err
	}
	time.Sleep(time.Second) // up, listening, idle
	if err := released(); err != nil {
		return nil, err
	}
	deadline := time.After(timeout)
	ms := make([]float64, 0, samples)
	for i := 0; i < warmup+samples; i++ {
		time.Sleep(20 * time.Millisecond)
		t0 := time.Now()
		if _, err := client.Insert(ctx, noopArgs{Num: i}, nil); err != nil {
			return nil, err
		}
		for got := false; !got; {
			select {
			case s := <-starts:
				if s.num == i {
					got = true
					if i >= warmup {
						ms = append(ms, float64(s.at.Sub(t0).Microseconds())/1000)
					}
				}
			case <-deadline:
				return nil, fmt.Errorf("latency run past %s", timeout)
			}
		}
	}
	if err := stop(ctx, client); err != nil {
		return nil, err
	}
	sort.Float64s(ms)
	pick := func(q float64) float64 { return ms[min(len(ms)-1, int(q*float64(len(ms))))] }
	sum := 0.0
	for _, v := range ms {
		sum += v
	}
	return map[string]any{
		"mode": "latency", "jobs": samples, "p50_ms": round(pick(0.50), 3),
		"p99_ms": round(pick(0.99), 3), "mean_ms": round(sum/float64(len(ms)), 3),
		"max_ms": round(ms[len(ms)-1], 3),
	}, nil
}

func stop(ctx context.Context, client *river.Client[pgx5Tx]) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := client.Stop(ctx); err != nil && !errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	return nil
}

// cpuSeconds: user + system CPU of this process so far (its share of a drain's cost).
func cpuSeconds() float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()).Seconds()
}

func round(v float64, places int) float64 {
	p := 1.0
	for range places {
		p *= 10
	}
	return float64(int64(v*p+0.5)) / p
}

// versions: River's module versions as built into this binary.
func versions() map[string]string {
	out := map[string]string{}
	if info, ok := debug.ReadBuildInfo(); ok {
		for _, dep := range info.Deps {
			switch dep.Path {
			case "github.com/riverqueue/river", "github.com/riverqueue/river/riverdriver/riverpgxv5",
				"github.com/jackc/pgx/v5":
				out[dep.Path] = dep.Version
			}
		}
	}
	return out
}
