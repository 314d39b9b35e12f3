// Package ui is the agent's map page: one HTML page, its script and its
// style sheet, embedded in the binary (gateways often have no Internet, so
// nothing is fetched from elsewhere). The page draws the sites laid out by
// delay, the matrix of one-way delays with the detours marked, this site's
// paths and route changes, and a link's last hour on a click; it follows
// the agent's server-sent events (GET /v1/events) and reconnects by itself
// when the agent restarts.
package ui

import (
	"embed"
	"io/fs"
	"net/http"
)

//go:embed assets
var assets embed.FS

// Handler serves the page at / and its files under /ui/.
func Handler() http.Handler {
	sub, err := fs.Sub(assets, "assets")
	if err != nil {
		panic(err) // the embedded tree is part of the binary
	}
	files := http.StripPrefix("/ui/", http.FileServerFS(sub))
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "no-cache")
		http.ServeFileFS(w, r, sub, "index.html")
	})
	mux.Handle("GET /ui/", files)
	return mux
}

// Size returns the bytes of every file of the page, for the payload
// budget.
func Size() int {
	n := 0
	fs.WalkDir(assets, "assets", func(path string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			if info, err := d.Info(); err == nil {
				n += int(info.Size())
			}
		}
		return nil
	})
	return n
}
