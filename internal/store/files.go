package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"sync"

	"github.com/sandpit-dev/sandpit/internal/errclass"
	"github.com/sandpit-dev/sandpit/internal/sandbox"
)

// FilesDir is the directory of runs' output files inside the data directory.
const FilesDir = "files"

// DefaultFilesMaxBytes is the default quota of all runs' output files together (2 GiB).
const DefaultFilesMaxBytes = 2 << 30

// A kept file is charged to files_max_bytes as the disk holds it: its bytes rounded up to
// whole 4 KiB blocks, and one block more for its inode, directory entry and ledger row. Counted
// as bytes alone, runs of 64 empty files each filled the disk's inodes while the quota saw 0.
const (
	fileBlockBytes    = 4096
	fileOverheadBytes = 4096
)

// chargeOf returns what a file of size bytes counts against files_max_bytes.
func chargeOf(size int64) int64 {
	return (size+fileBlockBytes-1)/fileBlockBytes*fileBlockBytes + fileOverheadBytes
}

// chargeSQL is chargeOf over execution_files.size_bytes, in SQL.
const chargeSQL = "(size_bytes + 4095) / 4096 * 4096 + 4096"

// ErrEvicted means an output file the ledger lists is no longer kept: the quota on all runs'
// files (files_max_bytes) made room for newer runs' files.
var ErrEvicted = errclass.New(errclass.Gone, "evicted")

// Files keeps the bytes of runs' output files in a directory, at <execution id>/<idx>, with
// which files are there in the ledger's table execution_files. Together they take at most a
// quota of bytes: storing a file over it evicts the files of the oldest executions first. The
// files of an execution go with its record (Prune, Discard). It is safe for concurrent use;
// it implements sandbox.FileStore.
type Files struct {
	st  *Store
	dir string
	max int64

	mu   sync.Mutex
	used int64 // the bytes execution_files lists
}

var _ sandbox.FileStore = (*Files)(nil)

// OpenFiles keeps runs' output files in dir (created if missing; FilesDir in the data
// directory) under a quota of maxBytes for all of them, and ties them to the ledger: from now
// on Prune and Discard delete an execution's files with its record. Directories of dir that
// belong to no execution (left by a crash) are removed. Call it once, before any run.
//
// On PostgreSQL the bytes are kept in the database (execution_files.content), so that every
// daemon sharing it serves every run's files; dir is not used.
func (s *Store) OpenFiles(ctx context.Context, dir string, maxBytes int64) (*Files, error) {
	if s.pg {
		f := &Files{st: s, max: maxBytes}
		if err := s.r.QueryRowContext(ctx, `SELECT coalesce(sum(`+chargeSQL+`), 0) FROM execution_files`).Scan(&f.used); err != nil {
			return nil, fmt.Errorf("counting the kept files: %w", err)
		}
		s.files = f
		return f, nil
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("creating the files directory: %w", err)
	}
	f := &Files{st: s, dir: dir, max: maxBytes}
	if err := s.r.QueryRowContext(ctx, `SELECT coalesce(sum(`+chargeSQL+`), 0) FROM execution_files`).Scan(&f.used); err != nil {
		return nil, fmt.Errorf("counting the kept files: %w", err)
	}
	if err := f.sweep(ctx); err != nil {
		return nil, err
	}
	s.files = f
	return f, nil
}

// sweep removes the entries of the directory that hold no kept file.
func (f *Files) sweep(ctx context.Context) error {
	entries, err := os.ReadDir(f.dir)
	if err != nil {
		return fmt.Errorf("reading the files directory: %w", err)
	}
	for _, e := range entries {
		var one int
		err := f.st.r.QueryRowContext(ctx, `SELECT 1 FROM execution_files WHERE execution_id = ? LIMIT 1`, e.Name()).Scan(&one)
		switch {
		case errors.Is(err, sql.ErrNoRows):
			if err := os.RemoveAll(filepath.Join(f.dir, e.Name())); err != nil {
				f.st.log.Warn("removing files that belong to no execution failed", "path", filepath.Join(f.dir, e.Name()), "error", err)
			}
		case err != nil:
			return fmt.Errorf("checking the files directory: %w", err)
		}
	}
	return nil
}

// Used returns how many bytes the kept files take, and the quota.
func (f *Files) Used() (used, quota int64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.used, f.max
}

// Put keeps content as execution id's output file file (sandbox.FileStore). It writes the
// bytes to a temporary file and renames it, then records it; when the quota has no room,
// the files of the oldest other executions are evicted first. Errors: a file larger than the
// whole quota, or one that does not fit once nothing else is left to evict, or the disk's.
func (f *Files) Put(ctx context.Context, id string, file sandbox.File, content []byte) error {
	if !sandbox.ValidID(id) {
		return fmt.Errorf("execution ID %q is not one", id)
	}
	if err := sandbox.CheckFileName(file.Name); err != nil {
		return err
	}
	size := int64(len(content))
	charge := chargeOf(size)
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.st.pg {
		// Other daemons keep files too: count what the database holds now.
		if err := f.st.r.QueryRowContext(ctx, `SELECT coalesce(sum(`+chargeSQL+`), 0) FROM execution_files`).Scan(&f.used); err != nil {
			return fmt.Errorf("counting the kept files: %w", err)
		}
	}
	if charge > f.max {
		return fmt.Errorf("the file takes %d bytes on disk, more than the %d bytes all runs' files may take (files_max_bytes)", charge, f.max)
	}
	for f.used+charge > f.max {
		evicted, err := f.evictOldest(ctx, id)
		if err != nil {
			return err
		}
		if !evicted {
			return fmt.Errorf("the files of this run, with the newest run's files of each agent (never evicted for another's), "+
				"fill the %d bytes all runs' files may take (files_max_bytes)", f.max)
		}
	}
	var idx int64
	if err := f.st.w.QueryRowContext(ctx, `SELECT coalesce(max(idx) + 1, 0) FROM execution_files WHERE execution_id = ?`, id).Scan(&idx); err != nil {
		return err
	}
	if f.st.pg {
		if _, err := f.st.w.ExecContext(ctx, `INSERT INTO execution_files (execution_id, name, idx, size_bytes, content) VALUES (?, ?, ?, ?, ?)`,
			id, file.Name, idx, size, nonNil(content)); err != nil {
			return fmt.Errorf("recording the file: %w", err)
		}
		f.used += charge
		return nil
	}
	path := filepath.Join(f.dir, id, strconv.FormatInt(idx, 10))
	if err := writeAtomically(path, content); err != nil {
		return fmt.Errorf("writing the file to the data directory: %w", err)
	}
	if _, err := f.st.w.ExecContext(ctx, `INSERT INTO execution_files (execution_id, name, idx, size_bytes) VALUES (?, ?, ?, ?)`,
		id, file.Name, idx, size); err != nil {
		_ = os.Remove(path)
		return fmt.Errorf("recording the file: %w", err)
	}
	f.used += charge
	return nil
}

// writeAtomically writes content to path (creating its directory) so that path holds either
// nothing or all of it: a temporary file beside it, renamed. It is not synced (a run's answer
// would wait for the disk, as the ledger's commits do not either: synchronous=NORMAL); after a
// power loss a file may be short, which Open finds by its size.
func writeAtomically(path string, content []byte) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".tmp-*")
	if err != nil {
		return err
	}
	_, err = tmp.Write(content)
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), path)
	}
	if err != nil {
		_ = os.Remove(tmp.Name())
	}
	return err
}

// evictOldest deletes the kept files of one execution other than keep, and returns false when
// none may go. Fairly between agents: files that belong to no record go first; then those of
// the agent whose files take the most, its oldest execution's, never its newest execution's.
// So one agent's runs push out their own older files, never another agent's newest. f.mu is
// held.
func (f *Files) evictOldest(ctx context.Context, keep string) (bool, error) {
	id, err := f.victim(ctx, keep)
	if err != nil || id == "" {
		return false, err
	}
	freed, err := f.deleteRows(ctx, f.st.w, id)
	if err != nil {
		return false, err
	}
	f.used -= freed
	// A finished record counted its files in its bytes (ledger_max_bytes); a running one
	// counts those still kept when it finishes.
	r, err := f.st.w.ExecContext(ctx, `UPDATE execution_bytes SET bytes = bytes - ? WHERE execution_id = ?
		AND EXISTS (SELECT 1 FROM executions e WHERE e.id = ? AND e.status = 'finished')`, freed, id, id)
	if err != nil {
		return false, err
	}
	if n, _ := r.RowsAffected(); n > 0 {
		f.st.ledger.add(-freed)
	}
	f.removeDirs(id)
	f.st.log.Info("evicted an execution's output files to keep all files within files_max_bytes", "id", id, "bytes", freed)
	return true, nil
}

// victim returns the execution whose files evictOldest deletes ("" for none).
func (f *Files) victim(ctx context.Context, keep string) (string, error) {
	var id string
	err := f.st.w.QueryRowContext(ctx, `SELECT ef.execution_id FROM execution_files ef WHERE ef.execution_id != ?
		AND NOT EXISTS (SELECT 1 FROM executions e WHERE e.id = ef.execution_id) LIMIT 1`, keep).Scan(&id)
	if err == nil || !errors.Is(err, sql.ErrNoRows) {
		return id, err
	}
	rows, err := f.st.w.QueryContext(ctx, `SELECT e.agent FROM execution_files ef JOIN executions e ON e.id = ef.execution_id
		GROUP BY e.agent ORDER BY sum(`+chargeSQL+`) DESC, e.agent`)
	if err != nil {
		return "", err
	}
	var agents []string
	for rows.Next() {
		var agent string
		if err := rows.Scan(&agent); err != nil {
			rows.Close()
			return "", err
		}
		agents = append(agents, agent)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return "", err
	}
	for _, agent := range agents {
		// The agent's executions with files, newest first: all but the newest may go.
		rows, err := f.st.w.QueryContext(ctx, `SELECT DISTINCT e.id, e.started_at FROM executions e
			JOIN execution_files ef ON ef.execution_id = e.id WHERE e.agent = ? ORDER BY e.started_at DESC, e.id DESC`, agent)
		if err != nil {
			return "", err
		}
		var ids []string
		for rows.Next() {
			var (
				id string
				at int64
			)
			if err := rows.Scan(&id, &at); err != nil {
				rows.Close()
				return "", err
			}
			ids = append(ids, id)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return "", err
		}
		for i := len(ids) - 1; i >= 1; i-- {
			if ids[i] != keep {
				return ids[i], nil
			}
		}
	}
	return "", nil
}

// execer is a *sql.DB or a *Tx.
type execer interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// deleteRows deletes the rows of execution id's kept files and returns their bytes.
func (f *Files) deleteRows(ctx context.Context, db execer, id string) (int64, error) {
	var freed int64
	if err := db.QueryRowContext(ctx, `SELECT coalesce(sum(`+chargeSQL+`), 0) FROM execution_files WHERE execution_id = ?`, id).Scan(&freed); err != nil {
		return 0, err
	}
	_, err := db.ExecContext(ctx, `DELETE FROM execution_files WHERE execution_id = ?`, id)
	return freed, err
}

// removeDirs removes the directories of the executions' files (their rows are gone).
func (f *Files) removeDirs(ids ...string) {
	if f.st.pg {
		return // the bytes went with the rows
	}
	for _, id := range ids {
		if !sandbox.ValidID(id) {
			continue
		}
		if err := os.RemoveAll(filepath.Join(f.dir, id)); err != nil {
			f.st.log.Warn("removing an execution's files failed; they are removed at the next start", "id", id, "error", err)
		}
	}
}

// forget accounts for freed bytes of files whose rows were deleted with their records, and
// removes their directories.
func (f *Files) forget(freed int64, ids []string) {
	f.mu.Lock()
	f.used -= freed
	f.mu.Unlock()
	f.removeDirs(ids...)
}

// Kept returns the names of execution id's output files whose bytes are kept: a name the
// record lists and this does not was evicted (files_max_bytes) or lost. Errors: the
// database's.
func (f *Files) Kept(ctx context.Context, id string) (map[string]bool, error) {
	rows, err := f.st.r.QueryContext(ctx, `SELECT name FROM execution_files WHERE execution_id = ?`, id)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	kept := map[string]bool{}
	for rows.Next() {
		var name string
		if err := rows.Scan(&name); err != nil {
			return nil, err
		}
		kept[name] = true
	}
	return kept, rows.Err()
}

// Open returns the bytes of execution id's kept output file name, an io.ReadSeeker: an
// *os.File, or on PostgreSQL a reader that fetches them a part at a time (a download holds at
// most one part of blobPart bytes, never the whole file). Errors: one
// wrapping ErrEvicted when no such file is kept (the caller, who found it in the record, knows
// it was there) or its bytes are missing or short (a power loss), or the disk's.
func (f *Files) Open(ctx context.Context, id, name string) (io.ReadCloser, error) {
	var idx, size int64
	err := f.st.r.QueryRowContext(ctx, `SELECT idx, size_bytes FROM execution_files WHERE execution_id = ? AND name = ?`, id, name).Scan(&idx, &size)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("file %q of execution %s: %w", name, id, ErrEvicted)
	}
	if err != nil {
		return nil, err
	}
	if f.st.pg {
		return &blobReader{ctx: ctx, db: f.st.r, id: id, idx: idx, size: size}, nil
	}
	file, err := os.Open(filepath.Join(f.dir, id, strconv.FormatInt(idx, 10)))
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("file %q of execution %s: its bytes are missing from the data directory: %w", name, id, ErrEvicted)
	}
	if err != nil {
		return nil, err
	}
	if st, err := file.Stat(); err != nil || st.Size() != size {
		file.Close()
		return nil, fmt.Errorf("file %q of execution %s: its bytes in the data directory are not all there: %w", name, id, ErrEvicted)
	}
	return file, nil
}

// orphanedFiles deletes the kept files' rows of executions that have no record any more, in
// tx, and returns their bytes and the executions.
func orphanedFiles(ctx context.Context, tx *Tx) (int64, []string, error) {
	rows, err := tx.QueryContext(ctx, `SELECT execution_id, sum(`+chargeSQL+`) FROM execution_files ef
		WHERE NOT EXISTS (SELECT 1 FROM executions e WHERE e.id = ef.execution_id) GROUP BY execution_id`)
	if err != nil {
		return 0, nil, err
	}
	var (
		ids   []string
		freed int64
	)
	for rows.Next() {
		var (
			id string
			n  int64
		)
		if err := rows.Scan(&id, &n); err != nil {
			rows.Close()
			return 0, nil, err
		}
		ids, freed = append(ids, id), freed+n
	}
	rows.Close()
	if err := rows.Err(); err != nil || len(ids) == 0 {
		return 0, nil, err
	}
	_, err = tx.ExecContext(ctx, `DELETE FROM execution_files WHERE NOT EXISTS (
		SELECT 1 FROM executions e WHERE e.id = execution_files.execution_id)`)
	return freed, ids, err
}

// blobPart is the most bytes a blobReader fetches at once.
const blobPart = 256 << 10

// blobReader reads a file kept in execution_files.content (PostgreSQL) a part at a time, by
// substring. It is an io.ReadSeekCloser over the size recorded; the file's row going (eviction)
// while it reads ends it with an error wrapping ErrEvicted.
type blobReader struct {
	ctx context.Context
	db  interface {
		QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
	}
	id   string
	idx  int64
	size int64
	off  int64
}

func (b *blobReader) Read(p []byte) (int, error) {
	if b.off >= b.size {
		return 0, io.EOF
	}
	n := min(int64(len(p)), blobPart, b.size-b.off)
	var part []byte
	err := b.db.QueryRowContext(b.ctx, `SELECT substring(content FROM ? FOR ?) FROM execution_files WHERE execution_id = ? AND idx = ?`,
		b.off+1, n, b.id, b.idx).Scan(&part)
	if errors.Is(err, sql.ErrNoRows) || (err == nil && int64(len(part)) != n) {
		return 0, fmt.Errorf("file %d of execution %s was evicted while it was read: %w", b.idx, b.id, ErrEvicted)
	}
	if err != nil {
		return 0, err
	}
	copy(p, part)
	b.off += n
	return int(n), nil
}

func (b *blobReader) Seek(offset int64, whence int) (int64, error) {
	switch whence {
	case io.SeekCurrent:
		offset += b.off
	case io.SeekEnd:
		offset += b.size
	}
	if offset < 0 {
		return 0, errors.New("seek before the start of the file")
	}
	b.off = offset
	return offset, nil
}

func (b *blobReader) Close() error { return nil }
