package lanman

import (
	"context"
	"sort"
	"sync"
	"time"

	"github.com/detour-overlay/detour/internal/api"
	"github.com/detour-overlay/detour/internal/experiment/model"
)

// Sampler records, while a phase runs, the one-way delays of the paths
// between the sites: from the emulator's ground truth (for the baseline
// overlays, which always take the direct link) or from detour's own
// measurements and routes (for detour). Medians over the phase feed the
// latency model.
type Sampler struct {
	tb     *Testbed
	agents map[string]*Agent // by site; nil for the baseline overlays
	sites  []string

	mu      sync.Mutex
	truth   map[[2]string][]float64
	detour  map[[2]string][]float64
	errs    int
	lastErr error
}

// NewSampler samples the paths between sites; agents is nil unless the
// overlay is detour.
func NewSampler(tb *Testbed, agents map[string]*Agent, sites []string) *Sampler {
	return &Sampler{tb: tb, agents: agents, sites: sites}
}

// Run samples every interval until ctx ends.
func (s *Sampler) Run(ctx context.Context, interval time.Duration) {
	s.mu.Lock()
	s.truth, s.detour = map[[2]string][]float64{}, map[[2]string][]float64{}
	s.mu.Unlock()
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		s.sampleOnce(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (s *Sampler) sampleOnce(ctx context.Context) {
	if links, err := s.tb.Truth(ctx); err == nil {
		s.addTruth(links)
	} else if ctx.Err() == nil {
		s.fail(err)
	}
	if s.agents != nil {
		if m, err := s.detourPaths(); err == nil {
			s.add(s.detour, m)
		} else {
			s.fail(err)
		}
	}
}

func (s *Sampler) fail(err error) {
	s.mu.Lock()
	s.errs++
	s.lastErr = err
	s.mu.Unlock()
}

func (s *Sampler) addTruth(links []LinkTruth) {
	m := model.Matrix{}
	for _, l := range links {
		v := l.ExpectedMS
		if v == 0 {
			v = l.DelayMS + l.QueueMS
		}
		m[[2]string{l.From, l.To}] = v
	}
	s.add(s.truth, m)
}

func (s *Sampler) add(into map[[2]string][]float64, m model.Matrix) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for k, v := range m {
		into[k] = append(into[k], v)
	}
}

// detourPaths computes the delay of the path each site's agent uses to
// each other site, from the link matrix the first agent holds (every site
// holds the same) and each agent's own routes. The delays are
// offset-shifted; round trips built from them are exact.
func (s *Sampler) detourPaths() (model.Matrix, error) {
	var links []api.Link
	var err error
	for _, site := range s.sites {
		if links, err = s.agents[site].Links(); err == nil {
			break
		}
	}
	if err != nil {
		return nil, err
	}
	lm := model.Matrix{}
	for _, l := range links {
		if l.Up {
			lm[[2]string{l.From, l.To}] = l.ShiftedMs
		}
	}
	paths := map[[2]string][]string{}
	for _, site := range s.sites {
		routes, err := s.agents[site].Routes()
		if err != nil {
			return nil, err
		}
		for _, r := range routes {
			paths[[2]string{site, r.Dest}] = fullPath(site, r.Dest, r.Path)
		}
	}
	return model.PathDelays(lm, func(a, b string) []string { return paths[[2]string{a, b}] }), nil
}

// fullPath makes a route's path run from src to dst whether or not the
// agent lists the endpoints.
func fullPath(src, dst string, p []string) []string {
	out := append([]string(nil), p...)
	if len(out) == 0 || out[0] != src {
		out = append([]string{src}, out...)
	}
	if out[len(out)-1] != dst {
		out = append(out, dst)
	}
	return out
}

// Medians returns the median delay of every pair over the phase: from
// detour's measurements when the overlay is detour, else from the truth.
func (s *Sampler) Medians() model.Matrix {
	s.mu.Lock()
	defer s.mu.Unlock()
	src := s.truth
	if s.agents != nil {
		src = s.detour
	}
	return medians(src)
}

// TruthMedians returns the median ground-truth delay of every directed
// link over the phase.
func (s *Sampler) TruthMedians() model.Matrix {
	s.mu.Lock()
	defer s.mu.Unlock()
	return medians(s.truth)
}

// Errors returns how many samples failed and the last error.
func (s *Sampler) Errors() (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.errs, s.lastErr
}

func medians(m map[[2]string][]float64) model.Matrix {
	out := model.Matrix{}
	for k, v := range m {
		if len(v) == 0 {
			continue
		}
		c := append([]float64(nil), v...)
		sort.Float64s(c)
		out[k] = c[len(c)/2]
	}
	return out
}
