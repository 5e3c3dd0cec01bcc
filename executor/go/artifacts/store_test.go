package artifacts

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
)

func digestOf(b []byte) string {
	s := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(s[:])
}

func TestPutGetLayoutAndDedup(t *testing.T) {
	s, err := Open(t.TempDir(), false)
	if err != nil {
		t.Fatal(err)
	}
	data := []byte("hello rara")
	ref, err := s.PutBytes(data, "text/plain")
	if err != nil {
		t.Fatal(err)
	}
	if ref.Digest != digestOf(data) || ref.Size != uint64(len(data)) || ref.MediaType != "text/plain" {
		t.Fatalf("ref %+v", ref)
	}
	hexd := ref.Digest[7:]
	path := filepath.Join(s.Root, "sha256", hexd[:2], hexd[2:]) // the Python store's layout
	st, err := os.Stat(path)
	if err != nil || st.Mode().Perm() != 0o444 {
		t.Fatalf("blob at %s: %v %v", path, st, err)
	}
	// Same content from many writers: stored once, no temp file left.
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			if _, err := s.PutBytes(data, ""); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if left, _ := os.ReadDir(filepath.Join(s.Root, "tmp")); len(left) != 0 {
		t.Fatalf("temp files left: %v", left)
	}
	got, err := s.GetBytes(ref)
	if err != nil || string(got) != string(data) {
		t.Fatalf("got %q, %v", got, err)
	}
	empty, err := s.PutBytes(nil, "")
	if err != nil || empty.Size != 0 || !s.Exists(empty) {
		t.Fatalf("empty blob: %+v %v", empty, err)
	}
}

func TestReadVerifies(t *testing.T) {
	s, _ := Open(t.TempDir(), false)
	ref, _ := s.PutBytes([]byte("original"), "")
	path, _ := s.PathOf(ref.Digest)
	_ = os.Chmod(path, 0o644)
	if err := os.WriteFile(path, []byte("tampered"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := s.GetBytes(ref); !errors.Is(err, ErrCorrupted) {
		t.Fatalf("want ErrCorrupted, got %v", err)
	}
	// Writing the same content again replaces the corrupt blob.
	if _, err := s.PutBytes([]byte("original"), ""); err != nil {
		t.Fatal(err)
	}
	if _, err := s.GetBytes(ref); err != nil {
		t.Fatalf("after rewrite: %v", err)
	}
	wrongSize := ref
	wrongSize.Size = 99
	if _, err := s.GetBytes(wrongSize); !errors.Is(err, ErrCorrupted) {
		t.Fatalf("want ErrCorrupted for a wrong size, got %v", err)
	}
	missing := Ref{Digest: digestOf([]byte("never stored"))}
	if _, err := s.GetBytes(missing); !errors.Is(err, ErrNotFound) {
		t.Fatalf("want ErrNotFound, got %v", err)
	}
	if _, err := s.PathOf("sha256:nothex"); err == nil {
		t.Fatal("a malformed digest must be refused")
	}
}

func TestWriterStreamsAndTempNames(t *testing.T) {
	s, _ := Open(t.TempDir(), true)
	w, err := s.NewWriter("")
	if err != nil {
		t.Fatal(err)
	}
	// The Python store's GC recognises in-flight writes by this name (store.py _TMP_NAME).
	re := regexp.MustCompile(`^rara-tmp\.[A-Za-z0-9-]+\.\d+\.[0-9a-f]{32}$`)
	if name := filepath.Base(w.tmp); !re.MatchString(name) {
		t.Fatalf("temp name %q", name)
	}
	for _, part := range []string{"a", "b", "c"} {
		if _, err := w.Write([]byte(part)); err != nil {
			t.Fatal(err)
		}
	}
	ref, err := w.Commit()
	if err != nil || ref.Digest != digestOf([]byte("abc")) {
		t.Fatalf("%+v %v", ref, err)
	}
	var pieces []string
	err = s.ReadChunks(ref, 2, func(b []byte) error { pieces = append(pieces, string(b)); return nil })
	if err != nil || len(pieces) != 2 || pieces[0] != "ab" || pieces[1] != "c" {
		t.Fatalf("pieces %q, %v", pieces, err)
	}
	aborted, _ := s.NewWriter("")
	_, _ = aborted.Write([]byte("gone"))
	aborted.Abort()
	if _, err := os.Stat(aborted.tmp); !os.IsNotExist(err) {
		t.Fatal("abort must remove the temp file")
	}
}

// A view from NotingReads notes what a read returned whole and verified; a missing or corrupt
// blob, Exists and writes are not reads, and the store itself notes nothing.
func TestNotingReads(t *testing.T) {
	s, err := Open(t.TempDir(), false)
	if err != nil {
		t.Fatal(err)
	}
	var reads Reads
	view := s.NotingReads(&reads)
	a, _ := view.PutBytes([]byte("a"), "")
	b, _ := view.PutBytes([]byte("b"), "")
	if got := reads.Sorted(); len(got) != 0 {
		t.Fatalf("writes noted as reads: %v", got)
	}
	view.Exists(b)
	if _, err := view.GetBytes(a); err != nil {
		t.Fatal(err)
	}
	missing := Ref{Digest: "sha256:" + strings.Repeat("0", 64)}
	if _, err := view.GetBytes(missing); err == nil {
		t.Fatal("a missing blob read")
	}
	if _, err := view.GetBytes(Ref{Digest: b.Digest, Size: 5}); err == nil {
		t.Fatal("a wrong size read")
	}
	if _, err := s.GetBytes(b); err != nil {
		t.Fatal(err)
	}
	if got := reads.Sorted(); len(got) != 1 || got[0] != a.Digest {
		t.Fatalf("reads %v, want only %s", got, a.Digest)
	}
}
