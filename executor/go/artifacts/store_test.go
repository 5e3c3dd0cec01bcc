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

// ---- links planted in the store (the same attacks as tests/security/test_artifact_attacks.py)

var secret = []byte("the contents of a file outside the store\n")

// linkedStore is a store and, beside it, a folder outside it holding a secret file.
func linkedStore(t *testing.T) (*Store, string) {
	t.Helper()
	tmp := t.TempDir()
	s, err := Open(filepath.Join(tmp, "store"), false)
	if err != nil {
		t.Fatal(err)
	}
	outside := filepath.Join(tmp, "outside")
	if err := os.Mkdir(outside, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(outside, "secret"), secret, 0o644); err != nil {
		t.Fatal(err)
	}
	return s, outside
}

// refusedNamingOnlyTheInside: err is ErrUnsafe naming inside, and neither where the link
// points nor the digest of what is there.
func refusedNamingOnlyTheInside(t *testing.T, err error, inside, outside string) {
	t.Helper()
	if !errors.Is(err, ErrUnsafe) {
		t.Fatalf("want ErrUnsafe, got %v", err)
	}
	text := err.Error()
	if !strings.Contains(text, inside) || strings.Contains(text, outside) ||
		strings.Contains(text, digestOf(secret)[7:]) {
		t.Fatalf("the error must name %q only: %s", inside, text)
	}
}

func listing(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	names := make([]string, len(entries))
	for i, e := range entries {
		names[i] = e.Name()
	}
	return names
}

func TestABlobLinkedToAnOutsideFileIsNeverRead(t *testing.T) {
	s, outside := linkedStore(t)
	// Under its own digest (it would "verify") and under another one (a corruption error
	// would print the outside file's hash).
	for _, digest := range []string{digestOf(secret), digestOf([]byte("something else"))} {
		path, _ := s.PathOf(digest)
		_ = os.MkdirAll(filepath.Dir(path), 0o755)
		if err := os.Symlink(filepath.Join(outside, "secret"), path); err != nil {
			t.Fatal(err)
		}
		ref := Ref{Digest: digest}
		if s.Exists(ref) {
			t.Fatal("a link counts as a stored blob")
		}
		_, err := s.GetBytes(ref)
		refusedNamingOnlyTheInside(t, err, "sha256/"+digest[7:9]+"/"+digest[9:], outside)
	}
	// Writing the content again replaces the link with the store's own blob.
	ref, err := s.PutBytes(secret, "")
	if err != nil {
		t.Fatal(err)
	}
	path, _ := s.PathOf(ref.Digest)
	if st, err := os.Lstat(path); err != nil || !st.Mode().IsRegular() {
		t.Fatalf("the link is still there: %v %v", st, err)
	}
	if got, err := s.GetBytes(ref); err != nil || string(got) != string(secret) {
		t.Fatalf("got %q, %v", got, err)
	}
	if names := listing(t, outside); len(names) != 1 || names[0] != "secret" {
		t.Fatalf("outside: %v", names)
	}
}

func TestAShardLinkedOutsideIsNeverWrittenThrough(t *testing.T) {
	s, outside := linkedStore(t)
	data := []byte("a blob for a linked shard")
	hexd := digestOf(data)[7:]
	if err := os.Symlink(outside, filepath.Join(s.Root, "sha256", hexd[:2])); err != nil {
		t.Fatal(err)
	}
	_, err := s.PutBytes(data, "")
	refusedNamingOnlyTheInside(t, err, "sha256/"+hexd[:2], outside)
	w, err := s.NewWriter("")
	if err != nil {
		t.Fatal(err)
	}
	_, _ = w.Write(data)
	_, err = w.Commit()
	refusedNamingOnlyTheInside(t, err, "sha256/"+hexd[:2], outside)
	if names := listing(t, outside); len(names) != 1 || names[0] != "secret" {
		t.Fatalf("written through the link: %v", names)
	}
	if names := listing(t, filepath.Join(s.Root, "tmp")); len(names) != 0 {
		t.Fatalf("temp files left: %v", names)
	}
	// A read through it is refused too, even of a blob that would verify.
	if err := os.WriteFile(filepath.Join(outside, hexd[2:]), data, 0o644); err != nil {
		t.Fatal(err)
	}
	_, err = s.GetBytes(Ref{Digest: "sha256:" + hexd})
	refusedNamingOnlyTheInside(t, err, "sha256/"+hexd[:2], outside)
	if s.Exists(Ref{Digest: "sha256:" + hexd}) {
		t.Fatal("a blob through a linked shard counts as stored")
	}
}

func TestALinkedTempFolderIsNeverWrittenThrough(t *testing.T) {
	s, outside := linkedStore(t)
	tmp := filepath.Join(s.Root, "tmp")
	if err := os.Remove(tmp); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, tmp); err != nil {
		t.Fatal(err)
	}
	_, err := s.PutBytes([]byte("through a linked tmp/"), "")
	refusedNamingOnlyTheInside(t, err, "tmp", outside)
	if names := listing(t, outside); len(names) != 1 || names[0] != "secret" {
		t.Fatalf("written through the link: %v", names)
	}
	// Opening a store whose sha256/ or tmp/ is a link is refused as well.
	if _, err := Open(s.Root, false); !errors.Is(err, ErrUnsafe) {
		t.Fatalf("want ErrUnsafe, got %v", err)
	}
}

func TestACorruptBlobsErrorNamesOnlyTheExpectedDigest(t *testing.T) {
	s, _ := Open(t.TempDir(), false)
	ref, _ := s.PutBytes([]byte("original"), "")
	path, _ := s.PathOf(ref.Digest)
	_ = os.Chmod(path, 0o644)
	if err := os.WriteFile(path, secret, 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := s.GetBytes(ref)
	if !errors.Is(err, ErrCorrupted) || !strings.Contains(err.Error(), ref.Digest) ||
		!strings.Contains(err.Error(), path) || strings.Contains(err.Error(), digestOf(secret)[7:]) {
		t.Fatalf("want ErrCorrupted naming %s and %s only, got %v", ref.Digest, path, err)
	}
}
