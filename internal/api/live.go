package api

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/detour-overlay/detour/internal/history"
)

// Live is one update of the map page (GET /v1/events): the site, its
// counters, the measured matrix in compact form, this site's routes, the
// detours and the route changes not sent before.
type Live struct {
	Site     string            `json:"site"`
	At       time.Time         `json:"at"`
	Members  []Member          `json:"members"`
	Counters map[string]uint64 `json:"counters"`
	Matrix   Matrix            `json:"matrix"`
	Routes   []Route           `json:"routes"`
	TIVs     []TIV             `json:"tivs"`
	Changes  []history.Event   `json:"changes"`
}

// Matrix is the measured matrix for a page: OneWayMs[i][j] is the
// estimated one-way delay from Sites[i] to Sites[j] (null when the link is
// down or unmeasured) and LossPct[i][j] its loss. A page at 54 sites
// receives about 30 KB a second.
type Matrix struct {
	Sites    []string     `json:"sites"`
	OneWayMs [][]*float64 `json:"one_way_ms"`
	LossPct  [][]float64  `json:"loss_pct"`
}

// HistoryLink is one link's record (GET /v1/history/{from}/{to}).
type HistoryLink struct {
	From    string           `json:"from"`
	To      string           `json:"to"`
	Samples []history.Sample `json:"samples"`
}

// HistoryIndex is what the history holds (GET /v1/history).
type HistoryIndex struct {
	// Links summarises each link's record.
	Links []history.Summary `json:"links"`
	// Bytes is the memory the record takes.
	Bytes int `json:"bytes"`
	// Events are the route changes kept, oldest first.
	Events []history.Event `json:"events"`
}

// SetHistory makes the server serve h (GET /v1/history...) and send its
// route changes on the live stream. Call it before serving.
func (s *Server) SetHistory(h *history.Recorder) { s.history = h }

// RecordHistory stores the backend's matrix in the history every period
// until ctx ends.
func (s *Server) RecordHistory(ctx context.Context, period time.Duration) {
	if s.history == nil {
		return
	}
	t := time.NewTicker(period)
	defer t.Stop()
	for {
		s.history.Record(time.Now(), historyLinks(s.b.Links()))
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func historyLinks(ls []Link) []history.Link {
	out := make([]history.Link, len(ls))
	for i, l := range ls {
		out[i] = history.Link{From: l.From, To: l.To, Up: l.Up, OneWayMs: l.OneWayMs, LossPct: l.LossPct}
	}
	return out
}

// live registers the page's endpoints: the history and the event stream.
func (s *Server) live(mux *http.ServeMux) {
	mux.HandleFunc("GET /v1/history", func(w http.ResponseWriter, r *http.Request) {
		if s.history == nil {
			reply(w, nil, fmt.Errorf("%w: this agent keeps no history", ErrNotFound))
			return
		}
		reply(w, HistoryIndex{Links: s.history.Summaries(), Bytes: s.history.Bytes(), Events: s.history.Events(0)}, nil)
	})
	mux.HandleFunc("GET /v1/history/{from}/{to}", func(w http.ResponseWriter, r *http.Request) {
		from, to := r.PathValue("from"), r.PathValue("to")
		var samples []history.Sample
		ok := false
		if s.history != nil {
			samples, ok = s.history.Series(from, to)
		}
		if !ok {
			reply(w, nil, fmt.Errorf("%w: no record of the link %s → %s", ErrNotFound, from, to))
			return
		}
		reply(w, HistoryLink{From: from, To: to, Samples: samples}, nil)
	})
	mux.HandleFunc("GET /v1/events", s.serveEvents)
}

// EventPeriod is how often the live stream sends an update; a route change
// is sent within EventCheck.
var (
	EventPeriod = time.Second
	EventCheck  = 100 * time.Millisecond
)

// serveEvents streams Live updates as server-sent events until the client
// goes away: one every EventPeriod, and one as soon as this site's paths
// change or a route change is recorded (checked every EventCheck).
// Browsers reconnect by themselves (after the retry time sent first) when
// the agent restarts.
func (s *Server) serveEvents(w http.ResponseWriter, r *http.Request) {
	fl, ok := w.(http.Flusher)
	if !ok {
		replyError(w, http.StatusInternalServerError, "streaming unsupported")
		return
	}
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-store")
	fmt.Fprintf(w, "retry: 1000\n\n")
	var since uint64
	if id, err := strconv.ParseUint(r.Header.Get("Last-Event-ID"), 10, 64); err == nil {
		since = id
	}
	t := time.NewTicker(min(EventCheck, EventPeriod))
	defer t.Stop()
	var sent time.Time
	var paths string
	for {
		now := time.Now()
		routes := s.b.Routes()
		if p := pathsOf(routes); now.Sub(sent) >= EventPeriod || p != paths || s.newEvents(since) {
			u := s.liveUpdate(since, routes)
			if n := len(u.Changes); n > 0 {
				since = u.Changes[n-1].Seq
			}
			b, err := json.Marshal(u)
			if err != nil {
				return
			}
			if _, err := fmt.Fprintf(w, "id: %d\nevent: live\ndata: %s\n\n", since, b); err != nil {
				return
			}
			fl.Flush()
			sent, paths = now, p
		}
		select {
		case <-r.Context().Done():
			return
		case <-t.C:
		}
	}
}

// pathsOf is a signature of the routes' paths, to notice a change.
func pathsOf(routes []Route) string {
	var b strings.Builder
	for _, r := range routes {
		b.WriteString(r.Dest)
		for _, p := range r.Path {
			b.WriteByte('>')
			b.WriteString(p)
		}
		b.WriteByte(';')
	}
	return b.String()
}

// newEvents reports whether route changes after since were recorded.
func (s *Server) newEvents(since uint64) bool {
	return s.history != nil && s.history.Last() > since
}

// liveUpdate builds one update with routes and the route changes after
// since.
func (s *Server) liveUpdate(since uint64, routes []Route) Live {
	st := s.b.Status()
	u := Live{Site: st.Site, At: time.Now(), Members: st.Members, Counters: st.Counters,
		Matrix: matrix(st.Site, s.b.Links()), Routes: routes, TIVs: s.b.TIVs(), Changes: []history.Event{}}
	if s.history != nil {
		u.Changes = s.history.Events(since)
	}
	return u
}

// matrix arranges links as a matrix over the sites they name and self.
func matrix(self string, links []Link) Matrix {
	idx := map[string]int{}
	sites := []string{}
	add := func(name string) {
		if _, ok := idx[name]; !ok && name != "" {
			idx[name] = 0
			sites = append(sites, name)
		}
	}
	add(self)
	for _, l := range links {
		add(l.From)
		add(l.To)
	}
	slices.Sort(sites)
	for i, n := range sites {
		idx[n] = i
	}
	m := Matrix{Sites: sites, OneWayMs: make([][]*float64, len(sites)), LossPct: make([][]float64, len(sites))}
	for i := range sites {
		m.OneWayMs[i] = make([]*float64, len(sites))
		m.LossPct[i] = make([]float64, len(sites))
	}
	for _, l := range links {
		i, j := idx[l.From], idx[l.To]
		if l.Up {
			v := math.Round(l.OneWayMs*100) / 100
			m.OneWayMs[i][j] = &v
		}
		m.LossPct[i][j] = math.Round(l.LossPct*100) / 100
	}
	return m
}
