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
// Read: every read re-hashes what it read and fails with ErrCorrupted on a mismatch, naming
// the expected digest and the blob's path only (never what the bytes hash to).
//
// Nothing below Root is followed through a link: every shard, blob and temp file is opened
// relative to a directory descriptor walked down from Root with O_NOFOLLOW, so a symbolic link
// planted in the store (a blob, a shard directory, tmp/) is refused with ErrUnsafe naming the
// path inside the store, never read, hashed, written through or removed through. (Root itself
// is configuration and may be a link.) A link where a blob belongs is replaced by the real blob
// when that content is written again: a rename never follows its target's link.
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
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// DefaultMediaType is what a ref without one means.
const DefaultMediaType = "application/octet-stream"

const (
	chunkSize = 1 << 20
	tmpPrefix = "rara-tmp."
	blobMode  = 0o444

	dirFlags  = unix.O_RDONLY | unix.O_DIRECTORY | unix.O_NOFOLLOW | unix.O_CLOEXEC
	readFlags = unix.O_RDONLY | unix.O_NOFOLLOW | unix.O_NONBLOCK | unix.O_CLOEXEC
	newFlags  = unix.O_WRONLY | unix.O_CREAT | unix.O_EXCL | unix.O_NOFOLLOW | unix.O_CLOEXEC
)

var (
	digestRE = regexp.MustCompile(`^sha256:[0-9a-f]{64}$`)
	hostRE   = regexp.MustCompile(`[^A-Za-z0-9-]`)
	// ErrNotFound: no blob under that digest.
	ErrNotFound = errors.New("artifact not found")
	// ErrCorrupted: the blob's bytes do not hash to its name (or the ref's size is wrong).
	ErrCorrupted = errors.New("artifact corrupted")
	// ErrUnsafe: a symbolic link, or a file of the wrong kind, where the store keeps its own
	// files (an *UnsafeError says where).
	ErrUnsafe = errors.New("artifact store unsafe")
)

// UnsafeError is ErrUnsafe at Where, the path inside the store ("sha256/ab/…", "tmp"):
// never where a link points, nor anything read there.
type UnsafeError struct {
	Where  string
	Detail string
}

func (e *UnsafeError) Error() string { return fmt.Sprintf("%s (%s)", e.Detail, e.Where) }

// Unwrap makes errors.Is(err, ErrUnsafe) hold.
func (e *UnsafeError) Unwrap() error { return ErrUnsafe }

func unsafeAt(where string) error {
	return &UnsafeError{Where: where, Detail: "a symbolic link or a file of the wrong kind " +
		"where the artifact store keeps its own; refused, not followed"}
}

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

// Open creates the layout under root if needed; a link (or a file) where sha256/ or tmp/
// belongs is refused.
func Open(root string, durable bool) (*Store, error) {
	s := &Store{Root: root, Durable: durable}
	if err := os.MkdirAll(root, 0o755); err != nil {
		return nil, err
	}
	for _, dir := range []string{"sha256", "tmp"} {
		fd, _, err := s.walk(true, dir)
		if err != nil {
			return nil, fmt.Errorf("artifact store %s: %w", root, err)
		}
		closeFd(fd)
	}
	return s, nil
}

// PathOf is where the blob of digest lives (whether or not it is there).
func (s *Store) PathOf(digest string) (string, error) {
	if err := ParseDigest(digest); err != nil {
		return "", err
	}
	hexd := digest[len("sha256:"):]
	return filepath.Join(s.Root, "sha256", hexd[:2], hexd[2:]), nil
}

// ---- walking below the root, links refused ---------------------------------------------

func retry[T any](call func() (T, error)) (T, error) {
	for {
		v, err := call()
		if !errors.Is(err, unix.EINTR) {
			return v, err
		}
	}
}

func closeFd(fd int) { _ = unix.Close(fd) }

// openDir opens the directory name (relative to dirfd) without following a link at name;
// where is its path inside the store, for the error.
func openDir(dirfd int, name, where string) (int, error) {
	fd, err := retry(func() (int, error) { return unix.Openat(dirfd, name, dirFlags, 0) })
	switch {
	case errors.Is(err, unix.ELOOP), errors.Is(err, unix.ENOTDIR):
		return -1, unsafeAt(where)
	case err != nil:
		return -1, &fs.PathError{Op: "open", Path: where, Err: err}
	}
	return fd, nil
}

// walk opens root/<parts...> as a directory descriptor (the caller closes it), and says
// whether a part was made. The first part is opened by its path (Root's own components are
// configuration, followed), each next one relative to the one above, all with O_NOFOLLOW, so
// a link swapped in meanwhile is refused too. create: make missing parts. An error matching
// fs.ErrNotExist if one is missing; an *UnsafeError if one is a link or not a directory.
func (s *Store) walk(create bool, parts ...string) (int, bool, error) {
	made := false
	fd := -1
	for i, part := range parts {
		where := strings.Join(parts[:i+1], "/")
		dirfd, name := fd, part
		if fd < 0 {
			dirfd, name = unix.AT_FDCWD, filepath.Join(s.Root, part)
		}
		child, err := openDir(dirfd, name, where)
		if errors.Is(err, fs.ErrNotExist) && create {
			merr := unix.Mkdirat(dirfd, name, 0o755)
			if merr == nil {
				made = true
			} else if !errors.Is(merr, unix.EEXIST) {
				err = &fs.PathError{Op: "mkdir", Path: where, Err: merr}
			}
			if merr == nil || errors.Is(merr, unix.EEXIST) {
				child, err = openDir(dirfd, name, where)
			}
		}
		if fd >= 0 {
			closeFd(fd)
		}
		if err != nil {
			return -1, false, err
		}
		fd = child
	}
	return fd, made, nil
}

func blobWhere(hexd string) string { return "sha256/" + hexd[:2] + "/" + hexd[2:] }

// openBlob opens the blob read-only, never through a link: ErrNotFound if it is not there,
// an *UnsafeError (naming the path inside the store) if it or a directory above it is a link
// or not what the store puts there.
func (s *Store) openBlob(digest string) (*os.File, error) {
	hexd := digest[len("sha256:"):]
	where := blobWhere(hexd)
	notFound := fmt.Errorf("%w: %s in %s", ErrNotFound, digest, s.Root)
	shard, _, err := s.walk(false, "sha256", hexd[:2])
	if errors.Is(err, fs.ErrNotExist) {
		return nil, notFound
	} else if err != nil {
		return nil, err
	}
	defer closeFd(shard)
	fd, err := retry(func() (int, error) { return unix.Openat(shard, hexd[2:], readFlags, 0) })
	switch {
	case errors.Is(err, unix.ENOENT):
		return nil, notFound
	case errors.Is(err, unix.ELOOP):
		return nil, unsafeAt(where)
	case err != nil:
		return nil, &fs.PathError{Op: "open", Path: where, Err: err}
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		closeFd(fd)
		return nil, &fs.PathError{Op: "stat", Path: where, Err: err}
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		closeFd(fd)
		return nil, unsafeAt(where)
	}
	// A regular file: reads never block, so it need not stay non-blocking.
	_ = unix.SetNonblock(fd, false)
	return os.NewFile(uintptr(fd), filepath.Join(s.Root, where)), nil
}

// Exists says whether a blob is stored under the ref's digest, as the store's own regular
// file (a link is not).
func (s *Store) Exists(ref Ref) bool {
	if ParseDigest(ref.Digest) != nil {
		return false
	}
	hexd := ref.Digest[len("sha256:"):]
	shard, _, err := s.walk(false, "sha256", hexd[:2])
	if err != nil {
		return false
	}
	defer closeFd(shard)
	var st unix.Stat_t
	err = unix.Fstatat(shard, hexd[2:], &st, unix.AT_SYMLINK_NOFOLLOW)
	return err == nil && st.Mode&unix.S_IFMT == unix.S_IFREG
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

// ---- writing ---------------------------------------------------------------------------

// Writer streams a blob in; Commit names it by its hash. tmp/ stays open for the writer's
// life: the temp file is created, renamed and removed relative to it, whatever becomes of
// the path meanwhile.
type Writer struct {
	store     *Store
	mediaType string
	file      *os.File
	tmpDir    int    // a descriptor of tmp/
	name      string // the temp file's name in it
	tmp       string // its path, for logs and tests
	hash      hash.Hash
	size      uint64
	done      bool
}

// NewWriter opens a temp file for a new blob (tmp/ is made again if it was removed).
func (s *Store) NewWriter(mediaType string) (*Writer, error) {
	dir, _, err := s.walk(true, "tmp")
	if err != nil {
		return nil, err
	}
	name := tmpName()
	// O_EXCL: never clobber, nor open through a link; 0o666 & ~umask like any new file.
	fd, err := retry(func() (int, error) { return unix.Openat(dir, name, newFlags, 0o666) })
	if err != nil {
		closeFd(dir)
		return nil, &fs.PathError{Op: "create", Path: "tmp/" + name, Err: err}
	}
	if mediaType == "" {
		mediaType = DefaultMediaType
	}
	path := filepath.Join(s.Root, "tmp", name)
	return &Writer{store: s, mediaType: mediaType, file: os.NewFile(uintptr(fd), path),
		tmpDir: dir, name: name, tmp: path, hash: sha256.New()}, nil
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
	defer closeFd(w.tmpDir)
	hexd := hex.EncodeToString(w.hash.Sum(nil))
	err := w.file.Chmod(blobMode)
	if err == nil && w.store.Durable {
		err = w.file.Sync()
	}
	if err == nil {
		err = w.stillOurs()
	}
	if cerr := w.file.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = w.store.install(w.tmpDir, w.name, hexd, w.size)
	}
	if err != nil {
		_ = unix.Unlinkat(w.tmpDir, w.name, 0) // a link is removed, not followed
		return Ref{}, err
	}
	return Ref{Digest: "sha256:" + hexd, Size: w.size, MediaType: w.mediaType}, nil
}

// stillOurs: the name about to be renamed onto the blob is still the file written (not a
// link or another file swapped in under it).
func (w *Writer) stillOurs() error {
	info, err := w.file.Stat()
	if err != nil {
		return err
	}
	mine, _ := info.Sys().(*syscall.Stat_t)
	var there unix.Stat_t
	err = unix.Fstatat(w.tmpDir, w.name, &there, unix.AT_SYMLINK_NOFOLLOW)
	if err != nil || mine == nil || uint64(there.Dev) != uint64(mine.Dev) ||
		uint64(there.Ino) != uint64(mine.Ino) {
		return &UnsafeError{Where: "tmp/" + w.name,
			Detail: "the temp file was replaced while being written; refused"}
	}
	return nil
}

// Abort discards what was written; a no-op after Commit.
func (w *Writer) Abort() {
	if w.done {
		return
	}
	w.done = true
	_ = w.file.Close()
	_ = unix.Unlinkat(w.tmpDir, w.name, 0)
	closeFd(w.tmpDir)
}

// install moves a finished, read-only temp file (name in tmpDir) onto its content address.
func (s *Store) install(tmpDir int, name, hexd string, size uint64) error {
	shard, newDir, err := s.walk(true, "sha256", hexd[:2])
	if err != nil {
		return err
	}
	defer closeFd(shard)
	if s.validIn(shard, hexd, size) {
		_ = unix.Unlinkat(tmpDir, name, 0)
		return nil
	}
	// Missing, corrupt or a link: (re)place it (a rename replaces a link, never follows it).
	// Racing writers of the same content each rename a complete copy of the same bytes.
	if err := unix.Renameat(tmpDir, name, shard, hexd[2:]); err != nil {
		return &fs.PathError{Op: "rename", Path: blobWhere(hexd), Err: err}
	}
	if s.Durable {
		if err := unix.Fsync(shard); err != nil {
			return err
		}
		if newDir {
			blobs, _, err := s.walk(false, "sha256")
			if err != nil {
				return err
			}
			defer closeFd(blobs)
			return unix.Fsync(blobs)
		}
	}
	return nil
}

// existingIsValid: the blob is stored, exactly; bumps its mtime (GC grace) if so. An error
// only when the shard directory is unsafe.
func (s *Store) existingIsValid(hexd string, size uint64) (bool, error) {
	shard, _, err := s.walk(false, "sha256", hexd[:2])
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	} else if err != nil {
		return false, err
	}
	defer closeFd(shard)
	return s.validIn(shard, hexd, size), nil
}

// validIn: the shard directory holds exactly the blob hexd as a regular file (a link there
// is not valid: it is replaced, never read); bumps its mtime (GC grace) if so.
func (s *Store) validIn(shard int, hexd string, size uint64) bool {
	fd, err := retry(func() (int, error) { return unix.Openat(shard, hexd[2:], readFlags, 0) })
	if err != nil {
		return false // not there, a link, or unreadable: written afresh
	}
	defer closeFd(fd)
	var st unix.Stat_t
	if unix.Fstat(fd, &st) != nil || st.Mode&unix.S_IFMT != unix.S_IFREG ||
		uint64(st.Size) != size {
		return false
	}
	h := sha256.New()
	buf := make([]byte, min(chunkSize, max(size, 1)))
	for {
		n, err := retry(func() (int, error) { return unix.Read(fd, buf) })
		if err != nil {
			return false
		}
		if n == 0 {
			break
		}
		h.Write(buf[:n])
	}
	if hex.EncodeToString(h.Sum(nil)) != hexd {
		return false
	}
	now := unix.NsecToTimeval(time.Now().UnixNano())
	_ = unix.Futimes(fd, []unix.Timeval{now, now}) // best effort: a shared volume may refuse
	return true
}

// PutBytes stores data (once: a valid blob already there is not rewritten).
func (s *Store) PutBytes(data []byte, mediaType string) (Ref, error) {
	sum := sha256.Sum256(data)
	hexd := hex.EncodeToString(sum[:])
	if mediaType == "" {
		mediaType = DefaultMediaType
	}
	valid, err := s.existingIsValid(hexd, uint64(len(data)))
	if err != nil {
		return Ref{}, err
	}
	if valid {
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

// ---- reading ---------------------------------------------------------------------------

// ReadChunks streams the blob in pieces of at most size bytes to fn, then verifies the whole
// blob against its digest (and the ref's size): fn may see bytes of a corrupt blob, but the
// call then fails with ErrCorrupted, so a caller commits nothing before it returned nil.
func (s *Store) ReadChunks(ref Ref, size int, fn func([]byte) error) error {
	if err := ParseDigest(ref.Digest); err != nil {
		return err
	}
	f, err := s.openBlob(ref.Digest)
	if err != nil {
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
	// The expected digest and the path only: what the bytes hash to would tell a caller the
	// digest of whatever sits there.
	if "sha256:"+hex.EncodeToString(h.Sum(nil)) != ref.Digest {
		return fmt.Errorf("%w: %s: the blob's bytes do not hash to its digest (%s)",
			ErrCorrupted, ref.Digest, f.Name())
	}
	if ref.Size != 0 && ref.Size != total {
		return fmt.Errorf("%w: %s: ref says %d bytes, blob has %d (%s)", ErrCorrupted,
			ref.Digest, ref.Size, total, f.Name())
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
