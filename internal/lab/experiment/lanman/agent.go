package lanman

import (
	"time"

	"github.com/detour-overlay/detour/internal/api"
	"github.com/detour-overlay/detour/internal/config"
	"github.com/detour-overlay/detour/internal/history"
	"github.com/detour-overlay/detour/internal/lab/experiment/nsnet"
)

// Agent reaches the detour agent of one site through its local API: the
// read-only views on loopback inside the site's gateway namespace, and
// changes through the agent's unix socket (the testbed gives it the path
// api.NetnsSocket of the namespace).
type Agent struct {
	Site string
	c    *api.Client
	ctl  *api.Client
}

// NewAgent returns a client for the agent in gateway namespace ns.
func NewAgent(site, ns string) *Agent {
	c := api.NewClient(config.DefaultAPI)
	c.HTTP = nsnet.HTTPClient(ns, 2*time.Second)
	return &Agent{Site: site, c: c, ctl: api.NewSocketClient(api.NetnsSocket(ns))}
}

// Routes is the agent's route table (`detour routes --json`).
func (a *Agent) Routes() ([]api.Route, error) {
	var r []api.Route
	return r, a.c.Get("/v1/routes", &r)
}

// Links is the agent's measured matrix (`detour links --json`).
func (a *Agent) Links() ([]api.Link, error) {
	var l []api.Link
	return l, a.c.Get("/v1/links", &l)
}

// Changes returns the route changes the agent kept, oldest first, with
// the times it made them (GET /v1/history).
func (a *Agent) Changes() ([]history.Event, error) {
	var h api.HistoryIndex
	return h.Events, a.c.Get("/v1/history", &h)
}

// PinDirect forces the direct path to dest (`detour route pin DEST`).
func (a *Agent) PinDirect(dest string) error {
	var out any
	return a.ctl.Post("/v1/pins", api.Pin{Dest: dest, Via: []string{}}, &out)
}

// Unpin gives the route to dest back to detour (`detour route unpin DEST`).
func (a *Agent) Unpin(dest string) error {
	var out any
	return a.ctl.Delete("/v1/pins/"+api.PathEscape(dest), &out)
}

// Path returns the path the agent uses to dest, or nil.
func Path(routes []api.Route, dest string) []string {
	for _, r := range routes {
		if r.Dest == dest {
			return r.Path
		}
	}
	return nil
}
