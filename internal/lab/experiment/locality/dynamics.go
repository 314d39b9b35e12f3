package locality

import (
	"context"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"sync"
	"time"

	"github.com/detour-overlay/detour/internal/lab/scenario"
)

// DynamicsSlowDelay is the one-way delay the dynamics phase gives the
// client's path to the nearby site (each way).
const DynamicsSlowDelay = 40 * time.Millisecond

// dynamics reads DynamicsSize-byte objects on every row, the rows
// concurrently, through five steps of DynamicsStep each: as built; the nearby path
// slowed to DynamicsSlowDelay each way (`testbed link set`); the path
// restored; the local disk's cap lifted; the cap restored. Reads should
// leave the nearby site within 2 s of the first change and come home
// within 2 s of the lifted cap.
func (e *env) dynamics(ctx context.Context, t *tb, rows []Row, rng *rand.Rand) ([]Sample, []Event, error) {
	sc, err := scenario.Load(filepath.Join(e.c.StateDir, "scenario.yaml"))
	if err != nil {
		return nil, nil, err
	}
	a, b := sc.SiteIndex(e.c.Client), sc.SiteIndex(e.c.Nearby)
	if a < 0 || b < 0 {
		return nil, nil, fmt.Errorf("locality: dynamics: no sites %s and %s", e.c.Client, e.c.Nearby)
	}
	ab, ba := sc.Link(a, b).Delay, sc.Link(b, a).Delay
	disk := e.st.DiskOf(e.disk.Address)
	if disk == nil {
		return nil, nil, fmt.Errorf("locality: dynamics: no disk record for %s", e.disk.Address)
	}
	linkSet := func(from, to string, d time.Duration) func(context.Context) error {
		return func(ctx context.Context) error {
			return t.run(ctx, 30*time.Second, "testbed", "link", "set", from, to, "--delay", d.String())
		}
	}
	steps := []struct {
		name   string
		change func(context.Context) error
	}{
		{"baseline", nil},
		{"nearby-slow", func(ctx context.Context) error {
			if err := linkSet(e.c.Client, e.c.Nearby, DynamicsSlowDelay)(ctx); err != nil {
				return err
			}
			return linkSet(e.c.Nearby, e.c.Client, DynamicsSlowDelay)(ctx)
		}},
		{"nearby-restored", func(ctx context.Context) error {
			if err := linkSet(e.c.Client, e.c.Nearby, ab)(ctx); err != nil {
				return err
			}
			return linkSet(e.c.Nearby, e.c.Client, ba)(ctx)
		}},
		{"disk-cap-lifted", func(context.Context) error { return disk.SetCap(0, 0) }},
		{"disk-cap-restored", func(context.Context) error { return disk.SetCap(disk.Config.ReadMBps, disk.Config.ReadIOPS) }},
	}
	var out []Sample
	var events []Event
	for _, st := range steps {
		if st.change != nil {
			at := time.Now()
			if err := st.change(ctx); err != nil {
				return out, events, err
			}
			events = append(events, Event{At: at, What: st.name})
		}
		fmt.Fprintf(e.c.Log, "locality: dynamics: %s for %v\n", st.name, e.c.DynamicsStep)
		s, err := e.concurrently(ctx, rows, st.name, time.Now().Add(e.c.DynamicsStep), rng.Uint64())
		out = append(out, s...)
		if err != nil {
			return out, events, err
		}
	}
	return out, events, nil
}

// concurrently reads on every row at once, each row in a loop of its own
// with the client's pause between reads, until end: a read that stalls
// (a TCP retransmission on a changed path) holds up its own row only,
// so each row's time series shows when it moved.
func (e *env) concurrently(ctx context.Context, rows []Row, phase string, end time.Time, seed uint64) ([]Sample, error) {
	var wg sync.WaitGroup
	per := make([][]Sample, len(rows))
	for i := range rows {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(seed, uint64(i)))
			for round := 0; time.Now().Before(end) && ctx.Err() == nil; round++ {
				per[i] = append(per[i], e.read(ctx, &rows[i], e.c.DynamicsSize, rng.IntN(e.c.Keys[e.c.DynamicsSize]), phase, round))
				if e.c.Pause > 0 {
					time.Sleep(e.c.Pause)
				}
			}
		}(i)
	}
	wg.Wait()
	var out []Sample
	for _, s := range per {
		out = append(out, s...)
	}
	return out, ctx.Err()
}
