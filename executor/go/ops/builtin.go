package ops

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"
	"unicode"

	"golang.org/x/text/unicode/norm"

	"rara.local/executor/go/artifacts"
	"rara.local/executor/go/executor"
)

// RegisterBuiltin adds the real example operations and the benchmark no-op.
func RegisterBuiltin(r *executor.Registry) {
	r.MustRegister(executor.Operation{Name: "text.normalize", Major: 1, Run: normalize})
	r.MustRegister(executor.Operation{Name: "artifact.chunk", Major: 1, Run: chunk})
	r.MustRegister(executor.Operation{Name: "bench.noop", Major: 1, Run: noop})
}

// noop does nothing: what a gRPC step costs beyond its work (bench/grpc_go_vs_python.py).
func noop(context.Context, *executor.Job) (*executor.Outcome, error) {
	return &executor.Outcome{Result: map[string]any{"ok": true}}, nil
}

// NormalizeText: Unicode NFKC (or "form": "NFC"), whitespace runs collapsed to one space
// (line breaks kept as "\n" unless "join_lines"), control characters dropped, ends trimmed,
// optionally lower-cased ("lower": true).
func NormalizeText(text string, form norm.Form, lower, joinLines bool) string {
	text = form.String(text)
	var b strings.Builder
	b.Grow(len(text))
	pendingSpace, pendingBreak := false, false
	for _, r := range text {
		switch {
		case r == '\n' && !joinLines:
			pendingBreak = true
		case unicode.IsSpace(r):
			pendingSpace = true
		case unicode.IsControl(r) || r == unicode.ReplacementChar:
			continue
		default:
			if b.Len() > 0 {
				if pendingBreak {
					b.WriteByte('\n')
				} else if pendingSpace {
					b.WriteByte(' ')
				}
			}
			pendingSpace, pendingBreak = false, false
			if lower {
				r = unicode.ToLower(r)
			}
			b.WriteRune(r)
		}
	}
	return b.String()
}

// normalize cleans text given inline ("text") or as an input artifact ("artifact": its name
// among the job's inputs). Inline text comes back in the result; an artifact's comes back as
// artifact normalized.txt.
func normalize(_ context.Context, job *executor.Job) (*executor.Outcome, error) {
	form := norm.NFKC
	switch f := str(job.Input, "form", "NFKC"); f {
	case "NFKC":
	case "NFC":
		form = norm.NFC
	default:
		return nil, executor.Failed(fmt.Sprintf("payload.form must be NFKC or NFC, got %q", f),
			false)
	}
	lower, joinLines := boolean(job.Input, "lower"), boolean(job.Input, "join_lines")
	if text, ok := job.Input["text"].(string); ok {
		out := NormalizeText(text, form, lower, joinLines)
		return &executor.Outcome{Result: map[string]any{"text": out,
			"chars": len([]rune(out))}}, nil
	}
	name := str(job.Input, "artifact", "")
	ref, ok := job.Inputs[name]
	if !ok {
		return nil, executor.Failed(fmt.Sprintf("payload needs \"text\" or \"artifact\" (the "+
			"name of an input artifact); got artifact %q", name), false)
	}
	data, err := job.Store.GetBytes(ref) // verified: a corrupt blob is an error, not text
	if err != nil {
		return nil, err
	}
	out := NormalizeText(string(data), form, lower, joinLines)
	outRef, err := job.Store.PutBytes([]byte(out), "text/plain; charset=utf-8")
	if err != nil {
		return nil, err
	}
	return &executor.Outcome{
		Result: map[string]any{"input": ref.Digest, "output": outRef.Digest,
			"chars": len([]rune(out))},
		Artifacts: []executor.OutputArtifact{{Name: "normalized.txt", Ref: outRef}},
	}, nil
}

type chunkEntry struct {
	Offset uint64 `json:"offset"`
	Size   int    `json:"size"`
	Digest string `json:"digest"`
}

// chunk splits an input artifact ("artifact": its name among the job's inputs) into pieces
// of "chunk_size" bytes (default 1 MiB), hashing each; with "store_chunks" each piece is also
// stored as a blob of its own (content-addressed: equal pieces are stored once). The index
// (offset, size, sha256 of every piece) is the artifact chunks.json. A checkpoint after every
// "checkpoint_every" pieces (default 64) lets a later attempt skip the pieces already done;
// the whole blob is still read, because the read is verified against the input's digest.
func chunk(_ context.Context, job *executor.Job) (*executor.Outcome, error) {
	name := str(job.Input, "artifact", "")
	ref, ok := job.Inputs[name]
	if !ok {
		return nil, executor.Failed(fmt.Sprintf("payload.artifact must name an input "+
			"artifact, got %q", name), false)
	}
	sizeF, err := number(job.Input, "chunk_size", 1<<20)
	if err != nil {
		return nil, err
	}
	everyF, err := number(job.Input, "checkpoint_every", 64)
	if err != nil {
		return nil, err
	}
	size, every := int(sizeF), max(1, int(everyF))
	if size < 1 || size > 64<<20 {
		return nil, executor.Failed("payload.chunk_size must be in [1, 64 MiB]", false)
	}
	store := boolean(job.Input, "store_chunks")
	var chunks []chunkEntry
	resumed := 0
	if cp := job.Checkpoint; cp != nil {
		// The state is this operation's own, from an earlier attempt of this step.
		if raw, err := json.Marshal(cp.State["chunks"]); err == nil {
			_ = json.Unmarshal(raw, &chunks)
		}
		if n, ok := cp.State["chunk_size"].(json.Number); !ok || n.String() != fmt.Sprint(size) {
			chunks = nil // another chunk size: the pieces do not line up
		}
		resumed = len(chunks)
	}
	var offset uint64
	index := 0
	err = job.Store.ReadChunks(ref, size, func(piece []byte) error {
		defer func() { offset += uint64(len(piece)); index++ }()
		if index < len(chunks) {
			return nil // done by an earlier attempt (its checkpoint)
		}
		if job.Cancelled() {
			return executor.Failed("stopped", true)
		}
		sum := sha256.Sum256(piece)
		digest := "sha256:" + hex.EncodeToString(sum[:])
		if store {
			if _, err := job.Store.PutBytes(bytes.Clone(piece), artifacts.DefaultMediaType); err != nil {
				return err
			}
		}
		chunks = append(chunks, chunkEntry{Offset: offset, Size: len(piece), Digest: digest})
		if ref.Size > 0 {
			job.Progress(float64(offset+uint64(len(piece)))/float64(ref.Size),
				fmt.Sprintf("chunk %d", index+1), map[string]float64{"chunks": float64(index + 1)})
		}
		if len(chunks)%every == 0 {
			return job.SaveCheckpoint(map[string]any{"chunk_size": size, "chunks": chunks}, nil)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	job.Logf("%d chunks of at most %d bytes, %d of them done by an earlier attempt", len(chunks),
		size, resumed)
	indexJSON, err := executor.Dumps(map[string]any{"input": ref.Digest, "chunk_size": size,
		"chunks": chunks})
	if err != nil {
		return nil, err
	}
	indexRef, err := job.Store.PutBytes(indexJSON, "application/json")
	if err != nil {
		return nil, err
	}
	return &executor.Outcome{
		Result: map[string]any{"input": ref.Digest, "size": ref.Size, "chunk_size": size,
			"chunks": len(chunks), "index": indexRef.Digest, "resumed_chunks": resumed},
		Artifacts: []executor.OutputArtifact{{Name: "chunks.json", Ref: indexRef}},
	}, nil
}
