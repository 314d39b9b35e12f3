package api

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"

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
}

// ErrNotFound is returned by a Backend for an unknown site; the server
// answers 404.
var ErrNotFound = errors.New("not found")

// ErrBadRequest is returned by a Backend for a request it cannot carry
// out as asked; the server answers 400.
var ErrBadRequest = errors.New("bad request")

// maxBody bounds request bodies.
const maxBody = 64 << 10

// NewHandler returns the HTTP handler of the API; reg's metrics are served
// at /metrics.
func NewHandler(b Backend, reg *prometheus.Registry) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/status", func(w http.ResponseWriter, r *http.Request) { reply(w, b.Status(), nil) })
	mux.HandleFunc("GET /v1/links", func(w http.ResponseWriter, r *http.Request) { reply(w, b.Links(), nil) })
	mux.HandleFunc("GET /v1/routes", func(w http.ResponseWriter, r *http.Request) { reply(w, b.Routes(), nil) })
	mux.HandleFunc("GET /v1/tivs", func(w http.ResponseWriter, r *http.Request) { reply(w, b.TIVs(), nil) })
	mux.HandleFunc("GET /v1/fdb", func(w http.ResponseWriter, r *http.Request) { reply(w, b.FDB(), nil) })
	mux.HandleFunc("GET /v1/why/{site}", func(w http.ResponseWriter, r *http.Request) {
		why, err := b.Why(r.PathValue("site"))
		reply(w, why, err)
	})
	mux.HandleFunc("POST /v1/pins", func(w http.ResponseWriter, r *http.Request) {
		var p Pin
		if err := decode(r, &p); err != nil {
			reply(w, nil, err)
			return
		}
		reply(w, p, b.Pin(p))
	})
	mux.HandleFunc("DELETE /v1/pins/{site}", func(w http.ResponseWriter, r *http.Request) {
		reply(w, map[string]string{"unpinned": r.PathValue("site")}, b.Unpin(r.PathValue("site")))
	})
	mux.HandleFunc("POST /v1/forbidden/{site}", func(w http.ResponseWriter, r *http.Request) {
		reply(w, map[string]string{"forbidden": r.PathValue("site")}, b.Forbid(r.PathValue("site")))
	})
	mux.HandleFunc("DELETE /v1/forbidden/{site}", func(w http.ResponseWriter, r *http.Request) {
		reply(w, map[string]string{"allowed": r.PathValue("site")}, b.Allow(r.PathValue("site")))
	})
	mux.HandleFunc("GET /v1/networks", func(w http.ResponseWriter, r *http.Request) { reply(w, b.Networks(), nil) })
	mux.HandleFunc("POST /v1/networks", func(w http.ResponseWriter, r *http.Request) {
		var n Network
		if err := decode(r, &n); err != nil {
			reply(w, nil, err)
			return
		}
		got, err := b.Attach(n)
		reply(w, got, err)
	})
	mux.HandleFunc("DELETE /v1/networks/{name}", func(w http.ResponseWriter, r *http.Request) {
		reply(w, map[string]string{"detached": r.PathValue("name")}, b.Detach(r.PathValue("name")))
	})
	mux.HandleFunc("PUT /v1/networks/{name}/limits", func(w http.ResponseWriter, r *http.Request) {
		var l Limits
		if err := decode(r, &l); err != nil {
			reply(w, nil, err)
			return
		}
		reply(w, l, b.SetLimits(r.PathValue("name"), l.MaxRate, l.MinRate))
	})
	mux.HandleFunc("PUT /v1/egress", func(w http.ResponseWriter, r *http.Request) {
		var e Egress
		if err := decode(r, &e); err != nil {
			reply(w, nil, err)
			return
		}
		reply(w, e, b.SetEgress(e.Rate))
	})
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	return mux
}

func decode(r *http.Request, v any) error {
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
		}
		w.WriteHeader(code)
		json.NewEncoder(w).Encode(Error{Error: err.Error()})
		return
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.Encode(v)
}
