// Package artifacts is the content-addressed artifact store on a local (or shared, POSIX)
// filesystem, byte-compatible with rara/artifacts/store.py, so Go and Python executors and
// workers share one store:
//
//	sha256/ab/cdef…                      one read-only (0444) file per blob, named by its sha256
//	tmp/rara-tmp.<host>.<pid>.<random>   blobs being written
//
// Write: bytes stream into a temp file in tmp/ (same filesystem) while being hashed; the file
// is fsynced, made read-only and renamed onto its content address, then the directory is
// fsynced. The hash computed while writing is the name, so a blob can never be stored under
// the wrong digest; a valid blob already there is kept (stored once), a corrupt one replaced.
// The temp names match the Python store's, so its garbage collector spares in-flight writes.
//
// Read: every read re-hashes what it read and fails with ErrCorrupted on a mismatch.
package artifacts

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"sync"
	"time"
)

// DefaultMediaType is what a ref without one means.
const DefaultMediaType = "application/octet-stream"

const (
	chunkSize = 1 << 20
	tmpPrefix = "rara-tmp."
	blobMode  = 0o444
)

var (
	digestRE = regexp.MustCompile(`^sha256:[0-9a-f]{64}$`)
	hostRE   = regexp.MustCompile(`[^A-Za-z0-9-]`)
	// ErrNotFound: no blob under that digest.
	ErrNotFound = errors.New("artifact not found")
	// ErrCorrupted: the blob's bytes do not hash to its name (or the ref's size is wrong).
	ErrCorrupted = errors.New("artifact corrupted")
)

// Ref points at a blob: "sha256:<64 hex>", its size and media type.
type Ref struct {
	Digest    string
	Size      uint64
	MediaType string
}

// ParseDigest checks a digest string's shape.
func ParseDigest(digest string) error {
	if !digestRE.MatchString(digest) {
		return fmt.Errorf("artifact digest must look like sha256:<64 hex>, got %q", digest)
	}
	return nil
}

// Store is a directory holding blobs; safe for concurrent use (it holds no mutable state but
// the Reads it notes into, which lock).
type Store struct {
	Root    string
	Durable bool   // false skips the fsyncs (tests, scratch stores)
	reads   *Reads // set by NotingReads: one job's view of the store
}

// Reads is the set of digests a job read from the store (lineage: the executor reports them
// with its success, JobSucceeded.reads); safe for concurrent use.
type Reads struct {
	mu      sync.Mutex
	digests map[string]struct{}
}

func (r *Reads) note(digest string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.digests == nil {
		r.digests = map[string]struct{}{}
	}
	r.digests[digest] = struct{}{}
}

// Sorted is the digests read so far, sorted; empty (not nil) when nothing was read.
func (r *Reads) Sorted() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]string, 0, len(r.digests))
	for d := range r.digests {
		out = append(out, d)
	}
	sort.Strings(out)
	return out
}

// NotingReads is the same store, noting into reads the digest of every blob a read
// (GetBytes, ReadChunks) returned whole and verified: what the job actually read. A failed
// read read nothing; Exists and writes are not reads.
func (s *Store) NotingReads(reads *Reads) *Store {
	view := *s
	view.reads = reads
	return &view
}

// Open creates the layout under root if needed.
func Open(root string, durable bool) (*Store, error) {
	s := &Store{Root: root, Durable: durable}
	for _, dir := range []string{s.blobDir(), s.tmpDir()} {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, err
		}
	}
	return s, nil
}

func (s *Store) blobDir() string { return filepath.Join(s.Root, "sha256") }
func (s *Store) tmpDir() string  { return filepath.Join(s.Root, "tmp") }

// PathOf is where the blob of digest lives (whether or not it is there).
func (s *Store) PathOf(digest string) (string, error) {
	if err := ParseDigest(digest); err != nil {
		return "", err
	}
	hexd := digest[len("sha256:"):]
	return filepath.Join(s.blobDir(), hexd[:2], hexd[2:]), nil
}

// Exists says whether a blob is stored under the ref's digest.
func (s *Store) Exists(ref Ref) bool {
	path, err := s.PathOf(ref.Digest)
	if err != nil {
		return false
	}
	st, err := os.Stat(path)
	return err == nil && st.Mode().IsRegular()
}

func tmpName() string {
	host, _ := os.Hostname()
	host = hostRE.ReplaceAllString(host, "-")
	if len(host) > 63 {
		host = host[:63]
	}
	if host == "" {
		host = "localhost"
	}
	var random [16]byte
	_, _ = rand.Read(random[:])
	return fmt.Sprintf("%s%s.%d.%s", tmpPrefix, host, os.Getpid(), hex.EncodeToString(random[:]))
}

// Writer streams a blob in; Commit names it by its hash.
type Writer struct {
	store     *Store
	mediaType string
	file      *os.File
	tmp       string
	hash      hash.Hash
	size      uint64
	done      bool
}

// NewWriter opens a temp file for a new blob.
func (s *Store) NewWriter(mediaType string) (*Writer, error) {
	path := filepath.Join(s.tmpDir(), tmpName())
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o666)
	if errors.Is(err, fs.ErrNotExist) { // tmp/ removed from under us: recreate once
		if err = os.MkdirAll(s.tmpDir(), 0o755); err == nil {
			f, err = os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o666)
		}
	}
	if err != nil {
		return nil, err
	}
	if mediaType == "" {
		mediaType = DefaultMediaType
	}
	return &Writer{store: s, mediaType: mediaType, file: f, tmp: path, hash: sha256.New()}, nil
}

func (w *Writer) Write(p []byte) (int, error) {
	if w.done {
		return 0, errors.New("write to a closed artifact writer")
	}
	n, err := w.file.Write(p)
	w.hash.Write(p[:n])
	w.size += uint64(n)
	return n, err
}

// Commit finishes the blob: fsync, read-only, rename onto its content address.
func (w *Writer) Commit() (Ref, error) {
	if w.done {
		return Ref{}, errors.New("artifact writer already closed")
	}
	w.done = true
	hexd := hex.EncodeToString(w.hash.Sum(nil))
	err := w.file.Chmod(blobMode)
	if err == nil && w.store.Durable {
		err = w.file.Sync()
	}
	if cerr := w.file.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = w.store.install(w.tmp, hexd, w.size)
	}
	if err != nil {
		_ = os.Remove(w.tmp)
		return Ref{}, err
	}
	return Ref{Digest: "sha256:" + hexd, Size: w.size, MediaType: w.mediaType}, nil
}

// Abort discards what was written; a no-op after Commit.
func (w *Writer) Abort() {
	if w.done {
		return
	}
	w.done = true
	_ = w.file.Close()
	_ = os.Remove(w.tmp)
}

func (s *Store) install(tmp, hexd string, size uint64) error {
	target := filepath.Join(s.blobDir(), hexd[:2], hexd[2:])
	if s.existingIsValid(target, hexd, size) {
		return os.Remove(tmp)
	}
	parent := filepath.Dir(target)
	_, statErr := os.Stat(parent)
	newDir := errors.Is(statErr, fs.ErrNotExist)
	if err := os.MkdirAll(parent, 0o755); err != nil {
		return err
	}
	// Racing writers of the same content each rename a complete copy of the same bytes.
	if err := os.Rename(tmp, target); err != nil {
		return err
	}
	if s.Durable {
		if err := syncDir(parent); err != nil {
			return err
		}
		if newDir {
			return syncDir(s.blobDir())
		}
	}
	return nil
}

func syncDir(path string) error {
	d, err := os.Open(path)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// existingIsValid: target holds exactly the blob; bumps its mtime (GC grace) if so.
func (s *Store) existingIsValid(target, hexd string, size uint64) bool {
	st, err := os.Stat(target)
	if err != nil || !st.Mode().IsRegular() || uint64(st.Size()) != size {
		return false
	}
	f, err := os.Open(target)
	if err != nil {
		return false
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil || hex.EncodeToString(h.Sum(nil)) != hexd {
		return false
	}
	now := time.Now()
	_ = os.Chtimes(target, now, now) // best effort: a shared volume may not allow it
	return true
}

// PutBytes stores data (once: a valid blob already there is not rewritten).
func (s *Store) PutBytes(data []byte, mediaType string) (Ref, error) {
	sum := sha256.Sum256(data)
	hexd := hex.EncodeToString(sum[:])
	if mediaType == "" {
		mediaType = DefaultMediaType
	}
	path := filepath.Join(s.blobDir(), hexd[:2], hexd[2:])
	if s.existingIsValid(path, hexd, uint64(len(data))) {
		return Ref{Digest: "sha256:" + hexd, Size: uint64(len(data)), MediaType: mediaType}, nil
	}
	w, err := s.NewWriter(mediaType)
	if err != nil {
		return Ref{}, err
	}
	if _, err := io.Copy(w, bytes.NewReader(data)); err != nil {
		w.Abort()
		return Ref{}, err
	}
	return w.Commit()
}

// ReadChunks streams the blob in pieces of at most size bytes to fn, then verifies the whole
// blob against its digest (and the ref's size): fn may see bytes of a corrupt blob, but the
// call then fails with ErrCorrupted, so a caller commits nothing before it returned nil.
func (s *Store) ReadChunks(ref Ref, size int, fn func([]byte) error) error {
	path, err := s.PathOf(ref.Digest)
	if err != nil {
		return err
	}
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("%w: %s in %s", ErrNotFound, ref.Digest, s.Root)
	} else if err != nil {
		return err
	}
	defer f.Close()
	if size <= 0 {
		size = chunkSize
	}
	h := sha256.New()
	buf := make([]byte, size)
	var total uint64
	for {
		n, err := io.ReadFull(f, buf)
		if n > 0 {
			h.Write(buf[:n])
			total += uint64(n)
			if ferr := fn(buf[:n]); ferr != nil {
				return ferr
			}
		}
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			break
		}
		if err != nil {
			return err
		}
	}
	actual := "sha256:" + hex.EncodeToString(h.Sum(nil))
	if actual != ref.Digest {
		return fmt.Errorf("%w: %s holds %s (%s)", ErrCorrupted, ref.Digest, actual, path)
	}
	if ref.Size != 0 && ref.Size != total {
		return fmt.Errorf("%w: %s: ref says %d bytes, blob has %d", ErrCorrupted, ref.Digest,
			ref.Size, total)
	}
	if s.reads != nil {
		s.reads.note(ref.Digest)
	}
	return nil
}

// GetBytes reads a whole blob, verified.
func (s *Store) GetBytes(ref Ref) ([]byte, error) {
	var out bytes.Buffer
	err := s.ReadChunks(ref, chunkSize, func(b []byte) error { _, e := out.Write(b); return e })
	if err != nil {
		return nil, err
	}
	return out.Bytes(), nil
}
