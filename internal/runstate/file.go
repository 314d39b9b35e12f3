package runstate

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// FS is what the file layer needs of a file system; OS is the real one,
// and the tests give one that loses what was not synced at a crash.
type FS interface {
	ReadFile(name string) ([]byte, error)
	// WriteSync creates name (truncating it), writes data and fsyncs it.
	WriteSync(name string, data []byte) error
	Rename(from, to string) error
	Remove(name string) error
	// SyncDir fsyncs a directory, making its renames durable.
	SyncDir(dir string) error
}

// OS is the operating system's file system.
type OS struct{}

// ReadFile implements FS.
func (OS) ReadFile(name string) ([]byte, error) { return os.ReadFile(name) }

// WriteSync implements FS.
func (OS) WriteSync(name string, data []byte) error {
	f, err := os.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// Rename implements FS.
func (OS) Rename(from, to string) error { return os.Rename(from, to) }

// Remove implements FS.
func (OS) Remove(name string) error { return os.Remove(name) }

// SyncDir implements FS.
func (OS) SyncDir(dir string) error {
	f, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = f.Sync()
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// Store keeps a site's document in one file. Save replaces the file
// atomically and durably: the document goes to PATH.tmp, which is
// fsynced, renamed over PATH, and the directory is fsynced. A crash at
// any moment leaves PATH holding the previous document or the new one,
// whole; once Save returns nil, the new one survives a crash.
type Store struct {
	Path string
	FS   FS
}

// NewStore returns the store of the file at path on the real file system.
func NewStore(path string) *Store { return &Store{Path: path, FS: OS{}} }

// DefaultPath is the state file beside a configuration file: site.yaml
// gives site.state.json in the same directory.
func DefaultPath(configPath string) string {
	base := strings.TrimSuffix(configPath, filepath.Ext(configPath))
	return base + ".state.json"
}

// Load reads the document, or returns the empty document of site when
// there is no file yet. A file that does not parse is an error: the agent
// refuses to start rather than forget acknowledged changes.
func (s *Store) Load(site string) (*Doc, error) {
	b, err := s.FS.ReadFile(s.Path)
	if errors.Is(err, fs.ErrNotExist) {
		return New(site), nil
	}
	if err != nil {
		return nil, err
	}
	d, err := Decode(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", s.Path, err)
	}
	return d, nil
}

// Save stores d.
func (s *Store) Save(d *Doc) error {
	if err := d.Validate(); err != nil {
		return err
	}
	tmp := s.Path + ".tmp"
	if err := s.FS.WriteSync(tmp, d.Encode()); err != nil {
		s.FS.Remove(tmp)
		return fmt.Errorf("runstate: %w", err)
	}
	if err := s.FS.Rename(tmp, s.Path); err != nil {
		s.FS.Remove(tmp)
		return fmt.Errorf("runstate: %w", err)
	}
	if err := s.FS.SyncDir(filepath.Dir(s.Path)); err != nil {
		return fmt.Errorf("runstate: %w", err)
	}
	return nil
}
