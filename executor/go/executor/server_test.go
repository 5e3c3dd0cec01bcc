package executor_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	pb "rara.local/api/gen/go/rara/v1"
	"rara.local/executor/go/artifacts"
	"rara.local/executor/go/executor"
	"rara.local/executor/go/ops"
)

const token = "test-token"

type fixture struct {
	server *executor.Server
	client pb.ExecutorServiceClient
	health healthpb.HealthClient
	store  *artifacts.Store
	ctx    context.Context // carries the token
}

func start(t *testing.T, maxConcurrency int, extra ...executor.Operation) *fixture {
	t.Helper()
	registry := executor.NewRegistry()
	ops.RegisterConformance(registry)
	ops.RegisterBuiltin(registry)
	for _, op := range extra {
		registry.MustRegister(op)
	}
	store, err := artifacts.Open(t.TempDir(), false)
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	service, err := executor.NewService(registry, store, maxConcurrency, 200*time.Millisecond, log)
	if err != nil {
		t.Fatal(err)
	}
	opts, err := executor.AuthConfig{Token: token}.ServerOptions()
	if err != nil {
		t.Fatal(err)
	}
	server := executor.NewServer(service, opts...)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = server.GRPC.Serve(lis) }()
	conn, err := grpc.NewClient(lis.Addr().String(),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = conn.Close()
		server.Stop(time.Second)
	})
	ctx := metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer "+token)
	return &fixture{server, pb.NewExecutorServiceClient(conn), healthpb.NewHealthClient(conn),
		store, ctx}
}

func job(capability, key, payload string) *pb.Job {
	return &pb.Job{Capability: capability, IdempotencyKey: key, Attempt: 1,
		PayloadJson: []byte(payload)}
}

func kind(ev *pb.ExecuteResponse) string {
	switch ev.GetEvent().(type) {
	case *pb.ExecuteResponse_Accepted:
		return "accepted"
	case *pb.ExecuteResponse_Running:
		return "running"
	case *pb.ExecuteResponse_Progress:
		return "progress"
	case *pb.ExecuteResponse_Checkpoint:
		return "checkpoint"
	case *pb.ExecuteResponse_Succeeded:
		return "succeeded"
	case *pb.ExecuteResponse_Failed:
		return "failed"
	case *pb.ExecuteResponse_Cancelled:
		return "cancelled"
	}
	return "?"
}

// collect reads a stream to its end, checking the contract's shape as it goes.
func collect(t *testing.T, stream grpc.ServerStreamingClient[pb.ExecuteResponse]) []*pb.ExecuteResponse {
	t.Helper()
	var events []*pb.ExecuteResponse
	for {
		ev, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("stream: %v", err)
		}
		if want := uint64(len(events) + 1); ev.Seq != want {
			t.Fatalf("seq %d, want %d", ev.Seq, want)
		}
		events = append(events, ev)
	}
	kinds := kinds(events)
	last := kinds[len(kinds)-1]
	if last != "succeeded" && last != "failed" && last != "cancelled" {
		t.Fatalf("no terminal event last: %v", kinds)
	}
	if len(kinds) > 1 && (kinds[0] != "accepted" || kinds[1] != "running") {
		t.Fatalf("a started job opens accepted, running: %v", kinds)
	}
	return events
}

func kinds(events []*pb.ExecuteResponse) []string {
	out := make([]string, len(events))
	for i, ev := range events {
		out[i] = kind(ev)
	}
	return out
}

func run(t *testing.T, f *fixture, j *pb.Job) []*pb.ExecuteResponse {
	t.Helper()
	stream, err := f.client.Execute(f.ctx, &pb.ExecuteRequest{Job: j})
	if err != nil {
		t.Fatal(err)
	}
	return collect(t, stream)
}

func untilRunning(t *testing.T, stream grpc.ServerStreamingClient[pb.ExecuteResponse]) {
	t.Helper()
	for {
		ev, err := stream.Recv()
		if err != nil {
			t.Fatalf("stream ended before running: %v", err)
		}
		if kind(ev) == "running" {
			return
		}
	}
}

func waitActive(t *testing.T, f *fixture, want uint32) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		caps, err := f.client.GetCapabilities(f.ctx, &pb.GetCapabilitiesRequest{})
		if err != nil {
			t.Fatal(err)
		}
		if caps.ActiveJobs == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("active_jobs %d, want %d", caps.ActiveJobs, want)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestOrderCheckpointAndResume(t *testing.T) {
	f := start(t, 4)
	events := run(t, f, job("test.echo@1", "k", `{"checkpoint": {"epoch": 7}, "n": 9007199254740993}`))
	if got := strings.Join(kinds(events), ","); got != "accepted,running,checkpoint,succeeded" {
		t.Fatal(got)
	}
	if s := string(events[2].GetCheckpoint().StateJson); s != `{"epoch":7}` {
		t.Fatal(s)
	}
	if r := string(events[3].GetSucceeded().ResultJson); !strings.Contains(r, `"n":9007199254740993`) {
		t.Fatalf("payload must round-trip exactly: %s", r)
	}
	resumed := job("test.echo@1", "k", "")
	resumed.Attempt = 2
	resumed.LastCheckpoint = &pb.Checkpoint{Attempt: 1, Seq: 3, StateJson: []byte(`{"epoch":7}`)}
	events = run(t, f, resumed)
	var result map[string]any
	_ = json.Unmarshal(events[len(events)-1].GetSucceeded().ResultJson, &result)
	if cp, _ := result["resumed_from"].(map[string]any); cp["epoch"] != 7.0 {
		t.Fatalf("resumed_from: %v", result)
	}
}

func TestRefusalsAreOneFailedEvent(t *testing.T) {
	f := start(t, 4)
	for _, c := range []struct {
		job  *pb.Job
		code pb.ErrorCode
	}{
		{job("test.echo@1", "a", "[1]"), pb.ErrorCode_ERROR_CODE_INVALID_ARGUMENT},
		{job("test.nope@1", "b", ""), pb.ErrorCode_ERROR_CODE_UNKNOWN_CAPABILITY},
		{job("test.echo@9", "c", ""), pb.ErrorCode_ERROR_CODE_INCOMPATIBLE_VERSION},
	} {
		events := run(t, f, c.job)
		if len(events) != 1 || events[0].GetFailed().Error.Code != c.code ||
			events[0].GetFailed().Error.Retryable {
			t.Errorf("%s: %v", c.job.Capability, events)
		}
	}
	late := job("test.echo@1", "d", "")
	late.Deadline = timestamppb.New(time.Now().Add(-time.Second))
	events := run(t, f, late)
	if e := events[0].GetFailed().GetError(); len(events) != 1 ||
		e.Code != pb.ErrorCode_ERROR_CODE_DEADLINE_EXCEEDED || !e.Retryable {
		t.Errorf("past deadline: %v", events)
	}
}

func TestCancelSoftAndHard(t *testing.T) {
	f := start(t, 4)
	for _, capability := range []string{"test.sleep@1", "test.hang@1"} {
		stream, err := f.client.Execute(f.ctx, &pb.ExecuteRequest{
			Job: job(capability, "c-"+capability, `{"seconds": 300}`)})
		if err != nil {
			t.Fatal(err)
		}
		untilRunning(t, stream)
		started := time.Now()
		resp, err := f.client.Cancel(f.ctx, &pb.CancelRequest{IdempotencyKey: "c-" + capability,
			Attempt: 1, Reason: "test"})
		if err != nil || !resp.Found {
			t.Fatalf("cancel: %v %v", resp, err)
		}
		var last *pb.ExecuteResponse
		for ev, err := stream.Recv(); err == nil; ev, err = stream.Recv() {
			last = ev
		}
		if last.GetCancelled().GetReason() != "test" {
			t.Fatalf("%s: %v", capability, last)
		}
		if took := time.Since(started); took > 2*time.Second {
			t.Fatalf("%s: stopped after %v", capability, took)
		}
	}
	resp, _ := f.client.Cancel(f.ctx, &pb.CancelRequest{IdempotencyKey: "none", Attempt: 1})
	if resp.Found {
		t.Fatal("unknown job: found=false")
	}
	waitActive(t, f, 0)
}

func TestDeadline(t *testing.T) {
	f := start(t, 4)
	j := job("test.sleep@1", "dl", `{"seconds": 300, "steps": 3000}`)
	j.Deadline = timestamppb.New(time.Now().Add(200 * time.Millisecond))
	events := run(t, f, j)
	e := events[len(events)-1].GetFailed().GetError()
	if e.GetCode() != pb.ErrorCode_ERROR_CODE_DEADLINE_EXCEEDED || !e.GetRetryable() {
		t.Fatal(events[len(events)-1])
	}
}

func TestDisconnectFreesTheSlotAndFullIsExhausted(t *testing.T) {
	f := start(t, 1)
	ctx, cancel := context.WithCancel(f.ctx)
	stream, err := f.client.Execute(ctx, &pb.ExecuteRequest{Job: job("test.sleep@1", "d", `{"seconds": 300}`)})
	if err != nil {
		t.Fatal(err)
	}
	untilRunning(t, stream)
	full, _ := f.client.Execute(f.ctx, &pb.ExecuteRequest{Job: job("test.echo@1", "e", "")})
	if _, err := full.Recv(); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("want RESOURCE_EXHAUSTED, got %v", err)
	}
	dup, _ := f.client.Execute(f.ctx, &pb.ExecuteRequest{Job: job("test.sleep@1", "d", "")})
	if _, err := dup.Recv(); status.Code(err) != codes.AlreadyExists {
		t.Fatalf("want ALREADY_EXISTS, got %v", err)
	}
	cancel()
	waitActive(t, f, 0)
}

func TestProgressIsCoalescedAndTheLatestSent(t *testing.T) {
	flood := executor.Operation{Name: "test.flood", Major: 1,
		Run: func(_ context.Context, j *executor.Job) (*executor.Outcome, error) {
			for i := 1; i <= 20000; i++ {
				j.Progress(float64(i)/20000, "", nil)
			}
			return nil, nil
		}}
	f := start(t, 4, flood)
	events := run(t, f, job("test.flood@1", "f", ""))
	progress := events[2 : len(events)-1]
	if len(progress) == 0 || len(progress) > 100 {
		t.Fatalf("%d progress events for 20000 updates", len(progress))
	}
	if p := progress[len(progress)-1].GetProgress(); p.GetFraction() != 1.0 {
		t.Fatalf("the latest progress must be sent: %v", p)
	}
	if string(events[len(events)-1].GetSucceeded().ResultJson) != "null" {
		t.Fatal("a nil outcome is a null result")
	}
}

func TestAuth(t *testing.T) {
	f := start(t, 4)
	if _, err := f.client.GetCapabilities(context.Background(), &pb.GetCapabilitiesRequest{}); status.Code(err) != codes.Unauthenticated {
		t.Fatalf("no token: %v", err)
	}
	wrong := metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer nope")
	stream, _ := f.client.Execute(wrong, &pb.ExecuteRequest{Job: job("test.echo@1", "u", "")})
	if _, err := stream.Recv(); status.Code(err) != codes.Unauthenticated {
		t.Fatalf("wrong token: %v", err)
	}
	// Health is exempt: Kubernetes probes cannot send metadata.
	resp, err := f.health.Check(context.Background(), &healthpb.HealthCheckRequest{})
	if err != nil || resp.Status != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("health: %v %v", resp, err)
	}
}

// A caller without the token learns nothing else, not even the size limit: an oversized
// request is refused as UNAUTHENTICATED, and only with the token as RESOURCE_EXHAUSTED.
func TestAuthBeforeSizeLimit(t *testing.T) {
	f := start(t, 4)
	big := strings.Repeat("x", executor.MaxMessageBytes+1)
	unlimited := grpc.MaxCallSendMsgSize(4 * executor.MaxMessageBytes) // another client's
	for name, ctx := range map[string]context.Context{"no token": context.Background(),
		"wrong token": metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer nope")} {
		_, err := f.client.Cancel(ctx, &pb.CancelRequest{IdempotencyKey: "k", Attempt: 1, Reason: big}, unlimited)
		if status.Code(err) != codes.Unauthenticated {
			t.Errorf("%s, unary: %v", name, err)
		}
		stream, _ := f.client.Execute(ctx, &pb.ExecuteRequest{Job: job("test.echo@1", "u", `{"b": "`+big+`"}`)}, unlimited)
		if _, err := stream.Recv(); status.Code(err) != codes.Unauthenticated {
			t.Errorf("%s, stream: %v", name, err)
		}
	}
	_, err := f.client.Cancel(f.ctx, &pb.CancelRequest{IdempotencyKey: "k", Attempt: 1, Reason: big}, unlimited)
	if status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("with the token, the size limit: %v", err)
	}
}

func TestDrain(t *testing.T) {
	f := start(t, 4)
	stream, err := f.client.Execute(f.ctx, &pb.ExecuteRequest{Job: job("test.hang@1", "h", "")})
	if err != nil {
		t.Fatal(err)
	}
	untilRunning(t, stream)
	stopped := make(chan struct{})
	go func() { f.server.Stop(500 * time.Millisecond); close(stopped) }()
	deadline := time.Now().Add(2 * time.Second)
	for {
		resp, err := f.health.Check(context.Background(), &healthpb.HealthCheckRequest{
			Service: pb.ExecutorService_ServiceDesc.ServiceName})
		if err == nil && resp.Status == healthpb.HealthCheckResponse_NOT_SERVING {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("health never NOT_SERVING: %v %v", resp, err)
		}
		time.Sleep(5 * time.Millisecond)
	}
	refused, _ := f.client.Execute(f.ctx, &pb.ExecuteRequest{Job: job("test.echo@1", "late", "")})
	if _, err := refused.Recv(); status.Code(err) != codes.Unavailable {
		t.Fatalf("while draining: %v", err)
	}
	var last *pb.ExecuteResponse
	for ev, err := stream.Recv(); err == nil; ev, err = stream.Recv() {
		last = ev
	}
	if e := last.GetFailed().GetError(); e.GetCode() != pb.ErrorCode_ERROR_CODE_UNAVAILABLE || !e.GetRetryable() {
		t.Fatalf("a job stopped by the drain: %v", last)
	}
	<-stopped
}

func TestNothingCredentialLookingLeaves(t *testing.T) {
	leaked := "hf_" + strings.Repeat("x", 34)
	op := func(name string, run executor.Func) executor.Operation {
		return executor.Operation{Name: name, Major: 1, Run: run}
	}
	f := start(t, 4,
		op("t.leaky-progress", func(_ context.Context, j *executor.Job) (*executor.Outcome, error) {
			j.Progress(0.5, "pushing with "+leaked, map[string]float64{"rate " + leaked: 1})
			return nil, nil
		}),
		op("t.leaky-error", func(context.Context, *executor.Job) (*executor.Outcome, error) {
			return nil, errors.New("cannot reach https://u:" + leaked + "@hub")
		}),
		op("t.leaky-result", func(context.Context, *executor.Job) (*executor.Outcome, error) {
			return &executor.Outcome{Result: map[string]any{"config": map[string]any{"auth": leaked}}}, nil
		}),
		op("t.leaky-checkpoint", func(_ context.Context, j *executor.Job) (*executor.Outcome, error) {
			return nil, j.SaveCheckpoint(map[string]any{"resume": map[string]any{"password": "hunter2"}}, nil)
		}))
	for name, want := range map[string]string{
		"t.leaky-progress":   "succeeded",
		"t.leaky-error":      "cannot reach",
		"t.leaky-result":     "result holds what looks like a secret at $.config.auth",
		"t.leaky-checkpoint": "checkpoint state holds what looks like a secret at $.resume.password",
	} {
		events := run(t, f, job(name+"@1", name, ""))
		text := fmt.Sprint(events)
		if strings.Contains(text, leaked) || strings.Contains(text, "hunter2") {
			t.Errorf("%s leaked: %s", name, text)
		}
		if !strings.Contains(text, want) {
			t.Errorf("%s: want %q in %s", name, want, text)
		}
		if name == "t.leaky-checkpoint" && strings.Contains(strings.Join(kinds(events), ","), "checkpoint") {
			t.Errorf("the checkpoint must not leave the process")
		}
	}
}

// The success reports the blobs the operation read through job.Store, not every input it was
// handed (lineage); an operation that read nothing reports an empty, present set.
func TestSuccessReportsWhatTheJobRead(t *testing.T) {
	f := start(t, 2)
	read, err := f.store.PutBytes([]byte("Read me"), "text/plain")
	if err != nil {
		t.Fatal(err)
	}
	unread, err := f.store.PutBytes([]byte("not me"), "text/plain")
	if err != nil {
		t.Fatal(err)
	}
	j := job("text.normalize@1", "reads", `{"artifact": "split/doc.txt"}`)
	j.Inputs = []*pb.ArtifactRef{
		{Name: "split/doc.txt", Digest: read.Digest, Size: read.Size},
		{Name: "split/other.txt", Digest: unread.Digest, Size: unread.Size},
	}
	events := run(t, f, j)
	succeeded := events[len(events)-1].GetSucceeded()
	if succeeded == nil {
		t.Fatalf("not a success: %v", events[len(events)-1])
	}
	if got := succeeded.GetReads().GetDigests(); len(got) != 1 || got[0] != read.Digest {
		t.Fatalf("reads %v, want only %s", got, read.Digest)
	}
	events = run(t, f, job("text.normalize@1", "no-reads", `{"text": "inline"}`))
	succeeded = events[len(events)-1].GetSucceeded()
	if succeeded.GetReads() == nil || len(succeeded.GetReads().GetDigests()) != 0 {
		t.Fatalf("reads %v, want present and empty", succeeded.GetReads())
	}
}

// A SessionRequest over the job limit ends the session with INVALID_ARGUMENT naming it; one
// at the limit is served.
func TestSessionJobLimit(t *testing.T) {
	f := start(t, 4)
	ctx, cancel := context.WithTimeout(f.ctx, 20*time.Second)
	defer cancel()
	stream, err := f.client.Session(ctx)
	if err != nil {
		t.Fatal(err)
	}
	batch := func(prefix string, n int) *pb.SessionRequest {
		req := &pb.SessionRequest{}
		for i := range n {
			req.Jobs = append(req.Jobs, job("nothing.here@1", fmt.Sprintf("%s%d", prefix, i), "{}"))
		}
		return req
	}
	if err := stream.Send(batch("a", executor.MaxSessionJobsPerMessage)); err != nil {
		t.Fatal(err)
	}
	for answered := 0; answered < executor.MaxSessionJobsPerMessage; {
		resp, err := stream.Recv()
		if err != nil {
			t.Fatal(err)
		}
		answered += len(resp.GetEvents())
	}
	if err := stream.Send(batch("b", executor.MaxSessionJobsPerMessage+1)); err != nil {
		t.Fatal(err)
	}
	resp, err := stream.Recv()
	if err == nil {
		t.Fatalf("an answer to a refused message: %v", resp)
	}
	want := fmt.Sprintf("carries %d jobs; the limit is %d jobs per message",
		executor.MaxSessionJobsPerMessage+1, executor.MaxSessionJobsPerMessage)
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), want) {
		t.Fatalf("want INVALID_ARGUMENT naming the limit, got %v", err)
	}
}
