package api

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/detour-overlay/detour/internal/history"
	"github.com/detour-overlay/detour/internal/ui"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Backend answers the API's questions; the agent implements it.
type Backend interface {
	Status() Status
	Links() []Link
	Routes() []Route
	TIVs() []TIV
	Why(site string) (Why, error)
	FDB() []FDBEntry
	Pin(p Pin) error
	Unpin(site string) error
	Forbid(site string) error
	Allow(site string) error
	Networks() []Network
	Attach(n Network) (Network, error)
	Detach(name string) error
	SetLimits(name, maxRate, minRate string) error
	SetEgress(rate string) error
	// Reload reads the configuration file again and applies what changed;
	// a file with an error, or a change that needs a restart, is refused
	// (ErrBadRequest) and the running configuration stays.
	Reload() (Reload, error)
	// KVPools returns the key router's pools at this gateway (kv.go).
	KVPools() []KVPool
	// KVPool returns one pool, or ErrNotFound.
	KVPool(name string) (KVPool, error)
	// KVChange changes a pool's servers at this gateway and returns the
	// pool as it is afterwards: ErrNotFound for an unknown pool or
	// server, ErrBadRequest for a change that cannot be made.
	KVChange(pool string, c KVChange) (KVPool, error)
}

// ErrNotFound is returned by a Backend for an unknown site; the server
// answers 404.
var ErrNotFound = errors.New("not found")

// ErrBadRequest is returned by a Backend for a request it cannot carry
// out as asked; the server answers 400.
var ErrBadRequest = errors.New("bad request")

// errMediaType is returned for a request body that is not declared as
// JSON; the server answers 415.
var errMediaType = errors.New("unsupported media type")

// maxBody bounds request bodies.
const maxBody = 64 << 10

// Server serves a Backend: the read-only views on one handler (for the TCP
// listener) and everything, changes included, on another (for the unix
// socket). It logs every change with the credentials of its caller and
// keeps the last one for GET /v1/status.
type Server struct {
	b   Backend
	reg *prometheus.Registry
	log *slog.Logger

	mu   sync.Mutex
	last *Change // the last change that succeeded

	history *history.Recorder // nil: no history kept
}

// NewServer returns a server of b; reg's metrics are served at /metrics.
func NewServer(b Backend, reg *prometheus.Registry, log *slog.Logger) *Server {
	if log == nil {
		log = slog.Default()
	}
	return &Server{b: b, reg: reg, log: log}
}

// ReadHandler returns the read-only views: the JSON GETs and /metrics. It
// does not check Host headers, methods or tokens: Guard does, for the TCP
// listener.
func (s *Server) ReadHandler() http.Handler {
	mux := http.NewServeMux()
	s.reads(mux)
	return mux
}

// LocalHandler returns every endpoint, changes included, for the unix
// socket. Each request must come from a caller acc allows (see
// LocalServer, which records the caller of each connection).
func (s *Server) LocalHandler(acc Access) http.Handler {
	mux := http.NewServeMux()
	s.reads(mux)
	s.changes(mux)
	return s.checkPeer(acc, mux)
}

func (s *Server) reads(mux *http.ServeMux) {
	b := s.b
	mux.HandleFunc("GET /v1/status", func(w http.ResponseWriter, r *http.Request) {
		st := b.Status()
		st.LastChange = s.lastChange()
		reply(w, st, nil)
	})
	mux.HandleFunc("GET /v1/links", func(w http.ResponseWriter, r *http.Request) { reply(w, b.Links(), nil) })
	mux.HandleFunc("GET /v1/routes", func(w http.ResponseWriter, r *http.Request) { reply(w, b.Routes(), nil) })
	mux.HandleFunc("GET /v1/tivs", func(w http.ResponseWriter, r *http.Request) { reply(w, b.TIVs(), nil) })
	mux.HandleFunc("GET /v1/fdb", func(w http.ResponseWriter, r *http.Request) { reply(w, b.FDB(), nil) })
	mux.HandleFunc("GET /v1/why/{site}", func(w http.ResponseWriter, r *http.Request) {
		why, err := b.Why(r.PathValue("site"))
		reply(w, why, err)
	})
	mux.HandleFunc("GET /v1/networks", func(w http.ResponseWriter, r *http.Request) { reply(w, b.Networks(), nil) })
	s.kvReads(mux)
	mux.Handle("GET /metrics", promhttp.HandlerFor(s.reg, promhttp.HandlerOpts{}))
	s.live(mux)
	mux.Handle("GET /", ui.Handler())
}

func (s *Server) changes(mux *http.ServeMux) {
	b := s.b
	s.trustChanges(mux)
	mux.HandleFunc("POST /v1/pins", func(w http.ResponseWriter, r *http.Request) {
		var p Pin
		if err := decode(r, &p); err != nil {
			reply(w, nil, err)
			return
		}
		what := "route pin " + p.Dest
		if len(p.Via) > 0 {
			what += " via " + strings.Join(p.Via, " ")
		}
		s.change(w, r, what, func() (any, error) { return p, b.Pin(p) })
	})
	mux.HandleFunc("DELETE /v1/pins/{site}", func(w http.ResponseWriter, r *http.Request) {
		site := r.PathValue("site")
		s.change(w, r, "route unpin "+site, func() (any, error) { return map[string]string{"unpinned": site}, b.Unpin(site) })
	})
	mux.HandleFunc("POST /v1/forbidden/{site}", func(w http.ResponseWriter, r *http.Request) {
		site := r.PathValue("site")
		s.change(w, r, "route forbid "+site, func() (any, error) { return map[string]string{"forbidden": site}, b.Forbid(site) })
	})
	mux.HandleFunc("DELETE /v1/forbidden/{site}", func(w http.ResponseWriter, r *http.Request) {
		site := r.PathValue("site")
		s.change(w, r, "route allow "+site, func() (any, error) { return map[string]string{"allowed": site}, b.Allow(site) })
	})
	mux.HandleFunc("POST /v1/networks", func(w http.ResponseWriter, r *http.Request) {
		var n Network
		if err := decode(r, &n); err != nil {
			reply(w, nil, err)
			return
		}
		what := fmt.Sprintf("net attach %s id %d tap %s", n.Name, n.ID, n.TAP)
		s.change(w, r, what, func() (any, error) { return b.Attach(n) })
	})
	mux.HandleFunc("DELETE /v1/networks/{name}", func(w http.ResponseWriter, r *http.Request) {
		name := r.PathValue("name")
		s.change(w, r, "net detach "+name, func() (any, error) { return map[string]string{"detached": name}, b.Detach(name) })
	})
	mux.HandleFunc("PUT /v1/networks/{name}/limits", func(w http.ResponseWriter, r *http.Request) {
		var l Limits
		if err := decode(r, &l); err != nil {
			reply(w, nil, err)
			return
		}
		name := r.PathValue("name")
		what := fmt.Sprintf("net limit %s max %s min %s", name, orNone(l.MaxRate), orNone(l.MinRate))
		s.change(w, r, what, func() (any, error) { return l, b.SetLimits(name, l.MaxRate, l.MinRate) })
	})
	mux.HandleFunc("PUT /v1/egress", func(w http.ResponseWriter, r *http.Request) {
		var e Egress
		if err := decode(r, &e); err != nil {
			reply(w, nil, err)
			return
		}
		s.change(w, r, "net egress "+orNone(e.Rate), func() (any, error) { return e, b.SetEgress(e.Rate) })
	})
	mux.HandleFunc("POST /v1/reload", func(w http.ResponseWriter, r *http.Request) {
		s.change(w, r, "reload", func() (any, error) { return b.Reload() })
	})
	s.kvChanges(mux)
}

// change carries out a change, logs it with its caller and the outcome,
// keeps it as the last change when it succeeded, and replies.
func (s *Server) change(w http.ResponseWriter, r *http.Request, what string, f func() (any, error)) {
	p, _ := PeerOf(r.Context())
	v, err := f()
	attrs := []any{"change", what, "uid", p.UID, "user", p.User, "pid", p.PID}
	if err != nil {
		s.log.Warn("api change refused by the agent", append(attrs, "err", err)...)
	} else {
		s.log.Info("api change", attrs...)
		s.mu.Lock()
		s.last = &Change{What: what, UID: p.UID, User: p.User, PID: p.PID, At: time.Now().UTC()}
		s.mu.Unlock()
	}
	reply(w, v, err)
}

func (s *Server) lastChange() *Change {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.last == nil {
		return nil
	}
	c := *s.last
	return &c
}

func orNone(rate string) string {
	if rate == "" {
		return "none"
	}
	return rate
}

// decode reads a JSON body; the request must declare it as JSON, so that
// nothing sent as a form or as text is taken for a command.
func decode(r *http.Request, v any) error {
	mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if err != nil || mt != "application/json" {
		return fmt.Errorf("%w: the body must be sent as Content-Type: application/json, not %q", errMediaType, r.Header.Get("Content-Type"))
	}
	dec := json.NewDecoder(io.LimitReader(r.Body, maxBody))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("%w: body: %v", ErrBadRequest, err)
	}
	return nil
}

func reply(w http.ResponseWriter, v any, err error) {
	w.Header().Set("Content-Type", "application/json")
	if err != nil {
		code := http.StatusInternalServerError
		switch {
		case errors.Is(err, ErrNotFound):
			code = http.StatusNotFound
		case errors.Is(err, ErrBadRequest):
			code = http.StatusBadRequest
		case errors.Is(err, errMediaType):
			code = http.StatusUnsupportedMediaType
		}
		replyError(w, code, err.Error())
		return
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.Encode(v)
}

// replyError answers with status code and an Error body.
func replyError(w http.ResponseWriter, code int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	json.NewEncoder(w).Encode(Error{Error: msg})
}
