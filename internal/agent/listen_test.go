package agent

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestReadToken(t *testing.T) {
	dir := t.TempDir()
	write := func(name, text string, mode os.FileMode) string {
		f := filepath.Join(dir, name)
		if err := os.WriteFile(f, []byte(text), mode); err != nil {
			t.Fatal(err)
		}
		os.Chmod(f, mode)
		return f
	}
	if tok, err := readToken(""); tok != "" || err != nil {
		t.Errorf("no token file: %q, %v", tok, err)
	}
	good := write("good", "  s3cr3t-token-of-32-characters!!\n", 0o600)
	if tok, err := readToken(good); tok != "s3cr3t-token-of-32-characters!!" || err != nil {
		t.Errorf("good token file: %q, %v", tok, err)
	}
	for _, c := range []struct{ file, want string }{
		{write("public", "s3cr3t-token-of-32-characters!!", 0o644), "readable by every user"},
		{write("short", "abc", 0o600), "at least 16 characters"},
		{write("two", "0123456789abcdef 0123456789abcdef", 0o600), "without spaces"},
		{filepath.Join(dir, "missing"), "no such file"},
	} {
		if _, err := readToken(c.file); err == nil || !strings.Contains(err.Error(), c.want) || !strings.HasPrefix(err.Error(), "api_token_file: ") {
			t.Errorf("%s: %v, want an api_token_file error saying %q", c.file, err, c.want)
		}
	}
}
