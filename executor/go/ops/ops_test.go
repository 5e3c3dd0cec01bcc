package ops

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"strings"
	"testing"

	"golang.org/x/text/unicode/norm"

	"rara.local/executor/go/artifacts"
	"rara.local/executor/go/executor"
)

func TestNormalizeText(t *testing.T) {
	for _, c := range []struct {
		in, want    string
		lower, join bool
	}{
		{"  Ｈｅｌｌｏ\t\tworld  ", "Hello world", false, false},
		{"ﬁne\u00a0print\x00", "fine print", false, false},
		{"a \n\n b\r\nc", "a\nb\nc", false, false},
		{"A \n B", "a b", true, true},
		{"", "", false, false},
	} {
		if got := NormalizeText(c.in, norm.NFKC, c.lower, c.join); got != c.want {
			t.Errorf("%q: got %q, want %q", c.in, got, c.want)
		}
	}
}

func TestRegisterKnowsItsSets(t *testing.T) {
	r := executor.NewRegistry()
	if err := Register(r, []string{"builtin", "conformance", "chaos"}); err != nil {
		t.Fatal(err)
	}
	if len(r.Operations()) != 8 {
		t.Fatalf("%d operations", len(r.Operations()))
	}
	if err := Register(executor.NewRegistry(), []string{"nope"}); err == nil {
		t.Fatal("an unknown set must be refused")
	}
}

// jobOn builds what an operation sees, without a server (Progress/SaveCheckpoint need one:
// the chunk test uses checkpoint_every beyond the piece count).
func jobOn(t *testing.T, store *artifacts.Store, input string, inputs map[string]artifacts.Ref,
	cp *executor.Checkpoint) *executor.Job {
	t.Helper()
	payload, err := executor.LoadsObject([]byte(input), "payload")
	if err != nil {
		t.Fatal(err)
	}
	return &executor.Job{Spec: &executor.Spec{IdempotencyKey: "k", Attempt: 1, Input: payload,
		Inputs: inputs, Checkpoint: cp}, Store: store}
}

func TestChunkAndResume(t *testing.T) {
	store, _ := artifacts.Open(t.TempDir(), false)
	data := []byte("0123456789")
	ref, _ := store.PutBytes(data, "")
	inputs := map[string]artifacts.Ref{"prep/data": ref}
	out, err := chunk(context.Background(), jobOn(t, store,
		`{"artifact": "prep/data", "chunk_size": 4, "checkpoint_every": 100, "store_chunks": true}`,
		inputs, nil))
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := store.GetBytes(out.Artifacts[0].Ref)
	var index struct {
		Chunks []chunkEntry `json:"chunks"`
	}
	if err := json.Unmarshal(raw, &index); err != nil || len(index.Chunks) != 3 {
		t.Fatalf("index %s: %v", raw, err)
	}
	for i, piece := range []string{"0123", "4567", "89"} {
		sum := sha256.Sum256([]byte(piece))
		want := "sha256:" + hex.EncodeToString(sum[:])
		if c := index.Chunks[i]; c.Digest != want || c.Offset != uint64(4*i) {
			t.Errorf("chunk %d: %+v", i, c)
		}
		if !store.Exists(artifacts.Ref{Digest: want}) {
			t.Errorf("chunk %d not stored", i)
		}
	}
	// A later attempt resumes after the checkpointed pieces and ends with the same index.
	state, _ := executor.LoadsObject([]byte(`{"chunk_size": 4, "chunks": [`+
		`{"offset": 0, "size": 4, "digest": "`+index.Chunks[0].Digest+`"}]}`), "state")
	again, err := chunk(context.Background(), jobOn(t, store,
		`{"artifact": "prep/data", "chunk_size": 4, "checkpoint_every": 100}`, inputs,
		&executor.Checkpoint{Attempt: 1, State: state}))
	if err != nil {
		t.Fatal(err)
	}
	result := again.Result.(map[string]any)
	if result["resumed_chunks"] != 1 || again.Artifacts[0].Ref != out.Artifacts[0].Ref {
		t.Fatalf("resume: %v", result)
	}
	if _, err := chunk(context.Background(), jobOn(t, store, `{"artifact": "missing"}`, inputs,
		nil)); err == nil || !strings.Contains(err.Error(), "input artifact") {
		t.Fatalf("missing input: %v", err)
	}
}

func TestNormalizeAnArtifact(t *testing.T) {
	store, _ := artifacts.Open(t.TempDir(), false)
	ref, _ := store.PutBytes([]byte("  Ｒａｒａ\r\n\r\n flows\x07 "), "text/plain")
	out, err := normalize(context.Background(), jobOn(t, store, `{"artifact": "doc"}`,
		map[string]artifacts.Ref{"doc": ref}, nil))
	if err != nil {
		t.Fatal(err)
	}
	text, err := store.GetBytes(out.Artifacts[0].Ref)
	if err != nil || string(text) != "Rara\nflows" {
		t.Fatalf("%q %v", text, err)
	}
	if _, err := normalize(context.Background(), jobOn(t, store, `{"text": "x", "form": "NFD"}`,
		nil, nil)); err == nil {
		t.Fatal("an unknown form must be refused")
	}
}
