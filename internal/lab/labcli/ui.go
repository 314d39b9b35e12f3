package labcli

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os/signal"
	"syscall"
	"time"

	"github.com/detour-overlay/detour/internal/lab/testbed"
)

// agentAPI is where every testbed agent serves its API, inside its
// gateway's namespace.
const agentAPI = "127.0.0.1:7447"

// tbUI serves one site's map page from the host's namespace with the
// emulator's truth beside the agent's estimates: it relays the page and
// the API of the agent in SITE's gateway and adds GET /lab/truth.
func tbUI(args []string, stdout, stderr io.Writer) error {
	fs, state := newFlags("ui", stderr)
	listen := fs.String("listen", "127.0.0.1:7450", "the address to serve the page on (loopback)")
	pos, _, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if err := wantArgs(pos, 1, "one site"); err != nil {
		return err
	}
	st, err := testbed.LoadState(*state)
	if err != nil {
		return err
	}
	site := st.Site(pos[0])
	if site == nil {
		return fmt.Errorf("%w: no site %q in this testbed", errUsage, pos[0])
	}
	if ap, err := net.ResolveTCPAddr("tcp", *listen); err != nil || !ap.IP.IsLoopback() {
		return fmt.Errorf("%w: --listen %q: want a loopback IP:port (the page has no token)", errUsage, *listen)
	}
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: labPage(*state, site.Gateway), ReadHeaderTimeout: 5 * time.Second}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	go func() { <-ctx.Done(); srv.Close() }()
	fmt.Fprintf(stdout, "http://%s/ : %s's map with the emulator's truth (Ctrl-C stops)\n", ln.Addr(), site.Name)
	if err := srv.Serve(ln); err != http.ErrServerClosed {
		return err
	}
	return nil
}

// labPage relays everything to the agent in namespace ns, but GET
// /lab/truth, which answers the emulator's truth of the testbed in state.
func labPage(state, ns string) http.Handler {
	target := &url.URL{Scheme: "http", Host: agentAPI}
	proxy := httputil.NewSingleHostReverseProxy(target)
	proxy.Transport = &http.Transport{
		DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
			return testbed.DialIn(ctx, ns, network, agentAPI)
		},
	}
	proxy.FlushInterval = -1 // the event stream goes through at once
	relay := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r.Host = agentAPI // the agent answers only its own address
		proxy.ServeHTTP(w, r)
	})
	mux := http.NewServeMux()
	mux.Handle("/", relay)
	mux.HandleFunc("GET /lab/truth", func(w http.ResponseWriter, r *http.Request) {
		t, err := testbed.GetTruth(state)
		if err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		writeJSONOut(w, t)
	})
	return mux
}
