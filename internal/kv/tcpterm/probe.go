package tcpterm

import (
	"context"
	"net/netip"
	"time"

	"github.com/detour-overlay/detour/internal/kv/proxy"
	"github.com/detour-overlay/detour/internal/kv/router"
)

// Keeping TCP-only replicas in. The agent checks a local server's health
// with a binary noop over UDP every 100 ms and takes it out after two
// checks in a row without any reply from it since the check. A memcached
// with extstore refuses UDP, so a disk replica never answers those: the
// terminator sends every local server of a replicated pool a `version`
// over its pooled TCP connection every Config.ProbeEvery, and the reply counts
// as the server's (router.Server.TCPReply), as a client's would. A server
// that answers neither is taken out as before.

// probeRetry is how long after a failed dial a server is dialled again.
const probeRetry = time.Second

var versionRequest = []byte("version\r\n")

// prober sends the probes of one terminator.
type prober struct {
	t      *Terminator
	failed map[netip.AddrPort]time.Time // servers whose dial failed, and when
}

// run probes until ctx is done.
func (pr *prober) run(ctx context.Context) {
	tick := time.NewTicker(pr.t.cfg.ProbeEvery)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-tick.C:
			pr.round(ctx, now)
		}
	}
}

// round sends one probe to each local server of each replicated pool.
func (pr *prober) round(ctx context.Context, now time.Time) {
	tb := pr.t.cfg.Table()
	if tb == nil {
		return
	}
	for _, p := range tb.Pools() {
		if !p.Replicated() {
			continue
		}
		for _, s := range p.Servers {
			if s.Local {
				pr.probe(ctx, p, s, now)
			}
		}
	}
}

// probe sends server s of pool p a version request.
func (pr *prober) probe(ctx context.Context, p *router.Pool, s *router.Server, now time.Time) {
	if at, ok := pr.failed[s.Addr]; ok && now.Sub(at) < probeRetry {
		return
	}
	key := upKey{vip: p.VIP.Addr(), server: s.Addr}
	uc, err := pr.t.upstream(ctx, key, s)
	if err != nil {
		pr.failed[s.Addr] = now
		return
	}
	delete(pr.failed, s.Addr)
	uc.send(p, []proxy.Send{{Buf: versionRequest}})
}
