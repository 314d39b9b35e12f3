package lanman

import (
	"context"
	"sort"
	"sync"
	"time"

	"github.com/detour-overlay/detour/internal/api"
	"github.com/detour-overlay/detour/internal/lab/experiment/model"
	"github.com/detour-overlay/detour/internal/lab/wanem"
)

// Sampler records, while a phase runs, the one-way delays of the paths
// between the sites: from the emulator's ground truth (for the baseline
// overlays, which always take the direct link) or from detour's own
// measurements and routes (for detour). Medians over the time a server was
// measured feed the latency model: under TCP cross traffic the queues move
// by tens of milliseconds within seconds.
type Sampler struct {
	tb     *Testbed
	agents map[string]*Agent // by site; nil for the baseline overlays
	sites  []string

	mu      sync.Mutex
	samples []delaySample
	errs    int
	lastErr error
}

// delaySample is one sampling instant: the delays of the direct links
// (truth) and of detour's paths, and the time to transmit a message with
// the value over each (txTruth, txDetour).
type delaySample struct {
	at                time.Time
	truth, detour     model.Matrix
	txTruth, txDetour model.Matrix
	// truthPaths is the ground-truth delay of detour's paths.
	truthPaths model.Matrix
}

// MessageBytes is the size on the wire of a message carrying the 1 KB
// value: 1024 bytes, the store's own header (about 100), TCP/IP (52) and
// the overlay's encapsulation (about 60).
const MessageBytes = 1250

// NewSampler samples the paths between sites; agents is nil unless the
// overlay is detour.
func NewSampler(tb *Testbed, agents map[string]*Agent, sites []string) *Sampler {
	return &Sampler{tb: tb, agents: agents, sites: sites}
}

// Run samples every interval until ctx ends.
func (s *Sampler) Run(ctx context.Context, interval time.Duration) {
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
	ds := delaySample{at: time.Now()}
	if links, err := s.tb.Truth(ctx); err == nil {
		ds.truth, ds.txTruth = truthMatrix(links)
	} else if ctx.Err() == nil {
		s.fail(err)
	}
	if s.agents != nil {
		if m, paths, err := s.detourPaths(); err == nil {
			ds.detour = m
			ds.txDetour = model.PathDelays(ds.txTruth, paths)
			ds.truthPaths = model.PathDelays(ds.truth, paths)
		} else {
			s.fail(err)
		}
	}
	s.mu.Lock()
	s.samples = append(s.samples, ds)
	s.mu.Unlock()
}

func (s *Sampler) fail(err error) {
	s.mu.Lock()
	s.errs++
	s.lastErr = err
	s.mu.Unlock()
}

// truthMatrix returns the delay of every directed link (configured plus
// current queueing) and the time to transmit a message over it at its
// configured rate.
func truthMatrix(links []wanem.LinkTruth) (delay, tx model.Matrix) {
	delay, tx = model.Matrix{}, model.Matrix{}
	for _, l := range links {
		v := l.ExpectedMS
		if v == 0 {
			v = l.DelayMS + l.QueueMS
		}
		k := [2]string{l.From, l.To}
		delay[k] = v
		tx[k] = model.TransmitMs(MessageBytes, l.RateBPS)
	}
	return delay, tx
}

// detourPaths computes the delay of the path each site's agent uses to
// each other site, from the link matrix the first agent that answers holds
// (every site holds the same), the mean delays each agent measures on its
// own links, and each agent's own routes. The delays are
// offset-shifted; round trips built from them are exact.
func (s *Sampler) detourPaths() (model.Matrix, func(a, b string) []string, error) {
	lm := model.Matrix{}
	var err error
	seen := 0
	for _, site := range s.sites {
		var links []api.Link
		if links, err = s.agents[site].Links(); err != nil {
			continue
		}
		seen++
		for _, l := range links {
			if !l.Up {
				continue
			}
			k := [2]string{l.From, l.To}
			switch {
			case l.From == site && l.MeanShiftedMs != 0:
				// A site's own links carry the mean of their recent
				// samples, which includes queueing; the link-state floor
				// does not, and a loaded link's queue is what the
				// operations wait in.
				lm[k] = l.MeanShiftedMs
			case seen == 1:
				lm[k] = l.ShiftedMs // every site holds the same matrix
			}
		}
	}
	if seen == 0 {
		return nil, nil, err
	}
	paths := map[[2]string][]string{}
	for _, site := range s.sites {
		routes, err := s.agents[site].Routes()
		if err != nil {
			return nil, nil, err
		}
		for _, r := range routes {
			paths[[2]string{site, r.Dest}] = fullPath(site, r.Dest, r.Path)
		}
	}
	path := func(a, b string) []string { return paths[[2]string{a, b}] }
	return model.PathDelays(lm, path), path, nil
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

// Net returns what the model needs for the samples taken between from and
// to (all samples when both are zero): the median delay of every path and
// the latest transmission times, from detour's measurements and routes
// when the overlay is detour, else from the truth.
func (s *Sampler) Net(from, to time.Time) (model.Net, model.Matrix) {
	src := fromTruth
	if s.agents != nil {
		src = fromDetour
	}
	return s.net(from, to, src)
}

// TruthNet is like Net but always takes the delays from the ground truth
// (along detour's paths when the overlay is detour): it separates the
// model's error from that of detour's measurements.
func (s *Sampler) TruthNet(from, to time.Time) model.Net {
	src := fromTruth
	if s.agents != nil {
		src = fromTruthAlongDetour
	}
	n, _ := s.net(from, to, src)
	return n
}

func (s *Sampler) net(from, to time.Time, src source) (model.Net, model.Matrix) {
	d, tx := s.window(from, to, src)
	return model.Net{Delay: d.Delays(), Tx: func(a, b string) float64 { return tx[[2]string{a, b}] }}, d
}

// source selects the delays of a sample.
type source int

const (
	fromTruth source = iota
	fromDetour
	fromTruthAlongDetour
)

// TruthMedians returns the median ground-truth delay of every directed
// link over the samples taken between from and to.
func (s *Sampler) TruthMedians(from, to time.Time) model.Matrix {
	d, _ := s.window(from, to, fromTruth)
	return d
}

func (s *Sampler) window(from, to time.Time, src source) (model.Matrix, model.Matrix) {
	s.mu.Lock()
	defer s.mu.Unlock()
	vals := map[[2]string][]float64{}
	tx := model.Matrix{}
	for _, ds := range s.samples {
		if !from.IsZero() && (ds.at.Before(from) || ds.at.After(to)) {
			continue
		}
		m, t := ds.truth, ds.txTruth
		switch src {
		case fromDetour:
			m, t = ds.detour, ds.txDetour
		case fromTruthAlongDetour:
			m, t = ds.truthPaths, ds.txDetour
		}
		for k, v := range m {
			vals[k] = append(vals[k], v)
		}
		for k, v := range t {
			tx[k] = v
		}
	}
	return medians(vals), tx
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
