package engine

import (
	"context"
	"fmt"
	"slices"
	"sync"

	"github.com/sandpit-dev/sandpit/internal/sandbox"
)

// validateFiles checks a request's input files against cfg: names (CheckFileName, each once),
// their count, each one's size and their total. The *FieldError names the file and the limit;
// a bad name or a repeated one is invalid (400), a count or size over its cap too large (413).
func validateFiles(files []sandbox.InputFile, cfg Config) error {
	if len(files) > cfg.MaxInputFiles {
		return &sandbox.FieldError{Field: "files", TooLarge: true, Message: fmt.Sprintf(
			"has %d files; the limit is %d files (max_input_files)", len(files), cfg.MaxInputFiles)}
	}
	seen := make(map[string]int, len(files))
	var total int64
	over := -1 // the file at which the total passes its cap
	for i, f := range files {
		field := fmt.Sprintf("files[%d]", i)
		if err := sandbox.CheckFileName(f.Name); err != nil {
			return &sandbox.FieldError{Field: field + ".name", Message: err.Error()}
		}
		if f.Name == sandbox.CodeFileName {
			return &sandbox.FieldError{Field: field + ".name", Message: fmt.Sprintf(
				"file name %q is where the run's code goes; give the file another name", f.Name)}
		}
		if j, ok := seen[f.Name]; ok {
			return &sandbox.FieldError{Field: field + ".name", Message: fmt.Sprintf(
				"file name %q is given twice (files[%d] and files[%d]); give each file once", f.Name, j, i)}
		}
		seen[f.Name] = i
		if n := int64(len(f.Content)); n > cfg.MaxInputFileBytes {
			return &sandbox.FieldError{Field: field + ".content", TooLarge: true, Message: fmt.Sprintf(
				"file %q is %d bytes; the limit is %d bytes per file (max_input_file_bytes)", f.Name, n, cfg.MaxInputFileBytes)}
		}
		total += int64(len(f.Content))
		if total > cfg.MaxInputFilesBytes && over < 0 {
			over = i
		}
	}
	// A file cannot also be a directory of another (nor main.py, where the code goes).
	for i, f := range files {
		for dir := range parentDirs(f.Name) {
			if j, ok := seen[dir]; ok || dir == sandbox.CodeFileName {
				msg := fmt.Sprintf("file name %q puts a file inside %q, which is the run's code file; give it another path", f.Name, dir)
				if ok {
					msg = fmt.Sprintf("file name %q puts a file inside %q, which files[%d] makes a file; give one of them another path", f.Name, dir, j)
				}
				return &sandbox.FieldError{Field: fmt.Sprintf("files[%d].name", i), Message: msg}
			}
		}
	}
	if over >= 0 {
		return &sandbox.FieldError{Field: "files", TooLarge: true, Message: fmt.Sprintf(
			"are %d bytes together, passing the limit of %d bytes for all files (max_input_files_bytes) at file %q",
			total, cfg.MaxInputFilesBytes, files[over].Name)}
	}
	return nil
}

// parentDirs yields the directories of a checked file name, outermost first ("a", "a/b" for
// "a/b/c").
func parentDirs(name string) func(yield func(string) bool) {
	return func(yield func(string) bool) {
		for i := range len(name) {
			if name[i] == '/' && !yield(name[:i]) {
				return
			}
		}
	}
}

// fileSink passes a run's output files to the FileStore as their events arrive, and keeps the
// names it could not store, with why.
type fileSink struct {
	store sandbox.FileStore
	id    string
	ctx   context.Context

	mu     sync.Mutex
	failed []sandbox.SkippedFile
}

// wrap returns the emit a runtime gets: file events are stored, then passed on to emit without
// their content (a file that could not be stored is not passed on); other events pass as they
// are. emit may be nil.
func (f *fileSink) wrap(emit func(sandbox.Event)) func(sandbox.Event) {
	return func(e sandbox.Event) {
		if e.Stream == sandbox.StreamFile {
			if e.File == nil {
				return
			}
			if f.store != nil {
				if err := f.store.Put(f.ctx, f.id, *e.File, e.Content); err != nil {
					f.mu.Lock()
					f.failed = append(f.failed, sandbox.SkippedFile{Name: e.File.Name, Reason: "not kept: " + err.Error()})
					f.mu.Unlock()
					return
				}
			}
			e.Content = nil
		}
		if emit != nil {
			emit(e)
		}
	}
}

// apply drops the files that could not be stored from res.Files and lists them in
// res.FilesSkipped (within MaxSkippedFiles; beyond it, FilesTruncated is set).
func (f *fileSink) apply(res sandbox.Result) sandbox.Result {
	f.mu.Lock()
	failed := slices.Clone(f.failed)
	f.mu.Unlock()
	if len(failed) == 0 {
		return res
	}
	res.Files = slices.DeleteFunc(res.Files, func(file sandbox.File) bool {
		return slices.ContainsFunc(failed, func(s sandbox.SkippedFile) bool { return s.Name == file.Name })
	})
	if len(res.Files) == 0 {
		res.Files = nil
	}
	for _, s := range failed {
		if len(res.FilesSkipped) >= sandbox.MaxSkippedFiles {
			res.FilesTruncated = true
			break
		}
		res.FilesSkipped = append(res.FilesSkipped, s)
	}
	return res
}
