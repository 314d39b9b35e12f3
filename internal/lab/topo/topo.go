// Package topo generates the synthetic overlays the simulator scales to:
// one-way delay matrices of any number of sites, built from measured
// inter-region latencies (Azure's 54 regions, AWS's 32) or drawn as random
// geometric networks with added detours (triangle-inequality
// violations). Every generator is a pure function of its arguments: the
// same kind, size and seed always give the same matrix.
//
// The generators and their parameters are described in docs/scaling.md.
package topo

import (
	"bytes"
	_ "embed"
	"encoding/csv"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
	"time"
)

//go:embed data/azure_p95_2026.csv
var azureCSV []byte

//go:embed data/aws_cloudping_p50_1y.csv
var awsCSV []byte

// Topology is a set of sites and the one-way delay of every directed link
// between them.
type Topology struct {
	// Name says how it was made, e.g. "azure-300/seed=1".
	Name  string
	Sites []string
	// Delay[i][j] is the one-way delay from site i to site j; the
	// diagonal is zero.
	Delay [][]time.Duration
}

// Kinds lists the generators Generate knows.
var Kinds = []string{"azure", "aws", "geometric"}

// ErrKind is returned for an unknown generator or size.
var ErrKind = errors.New("topo: unknown topology")

// Generate returns the topology of the given kind with n sites.
func Generate(kind string, n int, seed uint64) (*Topology, error) {
	if n < 2 {
		return nil, fmt.Errorf("%w: %d sites; want at least 2", ErrKind, n)
	}
	switch kind {
	case "azure":
		return fromMatrix("azure", azureCSV, n, seed)
	case "aws":
		return fromMatrix("aws", awsCSV, n, seed)
	case "geometric":
		return Geometric(n, seed), nil
	}
	return nil, fmt.Errorf("%w %q (known: %s)", ErrKind, kind, strings.Join(Kinds, ", "))
}

// Parameters of the generator from measured matrices.
const (
	// accessMin and accessMax bound the access delay of a synthetic site
	// to its region (uniform).
	accessMin = 500 * time.Microsecond
	accessMax = 6 * time.Millisecond
	// perturb scales each direction of a link with a synthetic end by
	// U(1 − perturb, 1 + perturb): the Internet paths of two edge sites
	// of the same regions are not the same path.
	perturb = 0.05
	// sameRegion is the one-way delay between two sites of one region,
	// on top of their access delays.
	sameRegion = 300 * time.Microsecond
)

// fromMatrix builds n sites from a measured round-trip matrix. With n up
// to the number of regions, it takes the regions at indices floor(i ×
// regions / n), evenly spaced through the table (as the azure-N scenario
// does), with one-way delay RTT/2 per direction as measured. Beyond, every
// region is a site and site k ≥ regions is an edge site of region k mod
// regions, with an access delay a_k drawn from U(accessMin, accessMax);
// between two sites of regions r and s the delay is RTT(r, s)/2 × U(1 −
// perturb, 1 + perturb) per direction (unperturbed between two region
// sites) plus both access delays, and between two sites of one region it
// is sameRegion plus both access delays. Real TIVs of the table stay; the
// perturbation adds more.
func fromMatrix(kind string, table []byte, n int, seed uint64) (*Topology, error) {
	regions, rtt, err := parseRTT(table)
	if err != nil {
		return nil, err
	}
	r := len(regions)
	rng := rand.New(rand.NewPCG(seed, seed^0x5ca1ab1e))
	region := make([]int, n)
	access := make([]time.Duration, n)
	names := make([]string, n)
	for i := range n {
		switch {
		case n <= r:
			region[i] = i * r / n
			names[i] = siteName(regions[region[i]])
		case i < r:
			region[i] = i
			names[i] = siteName(regions[i])
		default:
			region[i] = i % r
			access[i] = accessMin + time.Duration(rng.Int64N(int64(accessMax-accessMin)))
			names[i] = fmt.Sprintf("%s-edge-%d", siteName(regions[region[i]]), i/r)
		}
	}
	t := &Topology{Name: fmt.Sprintf("%s-%d/seed=%d", kind, n, seed), Sites: names, Delay: square(n)}
	for i := range n {
		for j := range n {
			if i == j {
				continue
			}
			a, b := region[i], region[j]
			var d float64
			if a == b {
				d = float64(sameRegion)
			} else {
				d = rtt[a][b] / 2 * float64(time.Millisecond)
				if access[i] > 0 || access[j] > 0 {
					d *= 1 + perturb*(2*rng.Float64()-1)
				}
			}
			t.Delay[i][j] = time.Duration(d) + access[i] + access[j]
		}
	}
	return t, nil
}

// Parameters of the random geometric generator.
const (
	// fibre is the propagation speed in fibre, km per ms.
	fibre = 200.0
	// stretchMin and stretchMax bound the ratio of a link's path length
	// to the great circle (uniform, per unordered pair).
	stretchMin, stretchMax = 1.3, 1.6
	// asym scales each direction by U(1 − asym, 1 + asym).
	asym = 0.03
	// detourShare of the directed links are routed badly: their delay is
	// multiplied by U(detourMin, detourMax), which makes most of them
	// slower than a path through a third site.
	detourShare          = 0.10
	detourMin, detourMax = 1.2, 2.0
	// earthRadius in km.
	earthRadius = 6371.0
)

// Geometric returns n sites at uniformly random points of the Earth's
// surface. A link's one-way delay is its great-circle distance at fibre
// speed times a stretch drawn per unordered pair from U(stretchMin,
// stretchMax) (which already breaks the triangle inequality for some
// triples), times U(1 − asym, 1 + asym) per direction, plus both ends'
// access delays U(accessMin, accessMax); then a share detourShare of the
// directed links, drawn at random, get an added detour: their delay is
// multiplied by U(detourMin, detourMax), as when a provider routes a
// path the long way round.
func Geometric(n int, seed uint64) *Topology {
	rng := rand.New(rand.NewPCG(seed, seed^0x6e0))
	lat, lon := make([]float64, n), make([]float64, n)
	access := make([]time.Duration, n)
	names := make([]string, n)
	for i := range n {
		lat[i] = math.Asin(2*rng.Float64() - 1)
		lon[i] = 2 * math.Pi * rng.Float64()
		access[i] = accessMin + time.Duration(rng.Int64N(int64(accessMax-accessMin)))
		names[i] = fmt.Sprintf("geo-%03d", i)
	}
	t := &Topology{Name: fmt.Sprintf("geometric-%d/seed=%d", n, seed), Sites: names, Delay: square(n)}
	for i := range n {
		for j := i + 1; j < n; j++ {
			km := earthRadius * greatCircle(lat[i], lon[i], lat[j], lon[j])
			base := km / fibre * (stretchMin + (stretchMax-stretchMin)*rng.Float64())
			for _, p := range [][2]int{{i, j}, {j, i}} {
				d := base * (1 + asym*(2*rng.Float64()-1))
				if rng.Float64() < detourShare {
					d *= detourMin + (detourMax-detourMin)*rng.Float64()
				}
				t.Delay[p[0]][p[1]] = time.Duration(d*float64(time.Millisecond)) + access[i] + access[j]
			}
		}
	}
	return t
}

// greatCircle returns the central angle between two points (radians).
func greatCircle(lat1, lon1, lat2, lon2 float64) float64 {
	s := math.Sin((lat2-lat1)/2)*math.Sin((lat2-lat1)/2) +
		math.Cos(lat1)*math.Cos(lat2)*math.Sin((lon2-lon1)/2)*math.Sin((lon2-lon1)/2)
	return 2 * math.Asin(math.Min(1, math.Sqrt(s)))
}

// TIVs returns how many ordered pairs have a one-hop detour faster than
// their direct link, and by at least 5 %.
func (t *Topology) TIVs() (any, fivePercent int) {
	n := len(t.Sites)
	for i := range n {
		for j := range n {
			if i == j {
				continue
			}
			best := t.Delay[i][j]
			for k := range n {
				if k != i && k != j {
					best = min(best, t.Delay[i][k]+t.Delay[k][j])
				}
			}
			if best < t.Delay[i][j] {
				any++
				if best < t.Delay[i][j]*95/100 {
					fivePercent++
				}
			}
		}
	}
	return any, fivePercent
}

func square(n int) [][]time.Duration {
	m := make([][]time.Duration, n)
	for i := range m {
		m[i] = make([]time.Duration, n)
	}
	return m
}

// parseRTT reads a table of round-trip times in milliseconds: a header of
// region names, then one row per source region; the diagonal is empty.
func parseRTT(b []byte) ([]string, [][]float64, error) {
	rows, err := csv.NewReader(bytes.NewReader(b)).ReadAll()
	if err != nil {
		return nil, nil, err
	}
	if len(rows) < 3 {
		return nil, nil, errors.New("topo: latency table has fewer than two regions")
	}
	regions := rows[0][1:]
	rtt := make([][]float64, 0, len(regions))
	for i, row := range rows[1:] {
		if len(row) != len(rows[0]) || row[0] != regions[i] {
			return nil, nil, fmt.Errorf("topo: latency table row %d does not match the header", i+2)
		}
		vals := make([]float64, len(regions))
		for j, cell := range row[1:] {
			if i == j {
				continue
			}
			if vals[j], err = strconv.ParseFloat(cell, 64); err != nil {
				return nil, nil, fmt.Errorf("topo: latency table row %d column %d: %v", i+2, j+2, err)
			}
		}
		rtt = append(rtt, vals)
	}
	return regions, rtt, nil
}

// siteName turns "Australia Central 2" into "australia-central-2".
func siteName(region string) string {
	return strings.ReplaceAll(strings.ToLower(strings.TrimSpace(region)), " ", "-")
}
