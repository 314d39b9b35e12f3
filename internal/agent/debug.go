package agent

import (
	"net/http"
	"net/http/pprof"
	"os"
)

// withProfiler adds Go's profiler under /debug/pprof/ to the read-only
// views when DETOUR_PPROF=1 is in the environment (for profiling a running
// agent: `go tool pprof http://127.0.0.1:7447/debug/pprof/profile`).
func withProfiler(h http.Handler) http.Handler {
	if os.Getenv("DETOUR_PPROF") != "1" {
		return h
	}
	mux := http.NewServeMux()
	mux.Handle("/", h)
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	return mux
}
