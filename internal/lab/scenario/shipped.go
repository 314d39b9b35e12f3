package scenario

import (
	"bytes"
	"embed"
	"encoding/csv"
	"errors"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"
)

//go:embed shipped/*.yaml
var shippedFS embed.FS

//go:embed data/azure_p95_2026.csv
var azureCSV []byte

// Shipped returns the names of the scenarios built into the binary
// (azure-N stands for every N from 2 to the number of regions).
func Shipped() []string {
	entries, _ := shippedFS.ReadDir("shipped")
	names := make([]string, 0, len(entries)+1)
	for _, e := range entries {
		names = append(names, strings.TrimSuffix(e.Name(), ".yaml"))
	}
	sort.Strings(names)
	return append(names, "azure-N")
}

// ShippedSource returns the YAML text of a shipped scenario (azure-N is
// generated and marshalled).
func ShippedSource(name string) ([]byte, error) {
	if b, err := shippedFS.ReadFile("shipped/" + name + ".yaml"); err == nil {
		return b, nil
	}
	if n, ok := azureN(name); ok {
		s, err := Azure(n)
		if err != nil {
			return nil, err
		}
		return s.Marshal()
	}
	return nil, fmt.Errorf("%w %q: not a file and not a shipped scenario (shipped: %s)", ErrUnknown, name, strings.Join(Shipped(), ", "))
}

// Load resolves nameOrPath to a scenario: an existing file is parsed;
// otherwise the name of a shipped scenario is looked up. Errors from a
// file are prefixed with its path.
func Load(nameOrPath string) (*Scenario, error) {
	if b, err := os.ReadFile(nameOrPath); err == nil {
		s, err := Parse(b)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", nameOrPath, err)
		}
		if s.Name == "" {
			s.Name = baseName(nameOrPath)
		}
		return s, nil
	} else if looksLikePath(nameOrPath) {
		return nil, fmt.Errorf("%w: %v", ErrUnknown, err)
	}
	b, err := ShippedSource(nameOrPath)
	if err != nil {
		return nil, err
	}
	s, err := Parse(b)
	if err != nil {
		return nil, fmt.Errorf("shipped scenario %s: %w", nameOrPath, err)
	}
	return s, nil
}

func looksLikePath(s string) bool {
	return strings.ContainsRune(s, '/') || strings.HasSuffix(s, ".yaml") || strings.HasSuffix(s, ".yml")
}

func baseName(path string) string {
	if i := strings.LastIndexByte(path, '/'); i >= 0 {
		path = path[i+1:]
	}
	path = strings.TrimSuffix(strings.TrimSuffix(path, ".yaml"), ".yml")
	if !nameRE.MatchString(path) {
		return "scenario"
	}
	return path
}

func azureN(name string) (int, bool) {
	num, ok := strings.CutPrefix(name, "azure-")
	if !ok {
		return 0, false
	}
	n, err := strconv.Atoi(num)
	return n, err == nil
}

// rttMatrix is a table of measured round-trip times between regions.
type rttMatrix struct {
	regions []string
	rtt     [][]float64 // rtt[src][dst] in milliseconds
}

func parseRTTCSV(b []byte) (*rttMatrix, error) {
	rows, err := csv.NewReader(bytes.NewReader(b)).ReadAll()
	if err != nil {
		return nil, err
	}
	if len(rows) < 3 {
		return nil, errors.New("latency table has fewer than two regions")
	}
	m := &rttMatrix{regions: rows[0][1:]}
	for i, row := range rows[1:] {
		if len(row) != len(rows[0]) || row[0] != m.regions[i] {
			return nil, fmt.Errorf("latency table row %d does not match the header", i+2)
		}
		vals := make([]float64, len(m.regions))
		for j, cell := range row[1:] {
			if i == j {
				continue
			}
			if vals[j], err = strconv.ParseFloat(cell, 64); err != nil {
				return nil, fmt.Errorf("latency table row %d column %d: %v", i+2, j+2, err)
			}
		}
		m.rtt = append(m.rtt, vals)
	}
	return m, nil
}

// AzureRegions returns the number of regions in the embedded Azure table.
func AzureRegions() int {
	m, err := parseRTTCSV(azureCSV)
	if err != nil {
		return 0
	}
	return len(m.regions)
}

// Azure generates the azure-N scenario from the embedded table of Azure
// P95 round-trip times (data/azure_p95_2026.csv, © Microsoft, CC BY 4.0).
//
// Regions: the table lists 54 regions in alphabetical order; azure-N takes
// the rows at indices floor(i*54/N) for i = 0..N-1, i.e. N regions evenly
// spaced through the alphabet. That is deterministic, needs no judgement,
// and spreads the choice over all continents rather than taking the four
// Australian regions first.
//
// Delays: the one-way delay of a→b is half the RTT in row a, column b
// (the file's row is the source); b→a is half of row b, column a. The two
// directions therefore differ where Azure's two measurements differ, and
// d(a,b)+d(b,a) is the mean of the two P95 RTTs. Links are not
// rate-limited.
func Azure(n int) (*Scenario, error) {
	m, err := parseRTTCSV(azureCSV)
	if err != nil {
		return nil, err
	}
	if n < 2 || n > len(m.regions) {
		return nil, fmt.Errorf("%w azure-%d: N must be between 2 and %d", ErrUnknown, n, len(m.regions))
	}
	idx := make([]int, n)
	for i := range idx {
		idx[i] = i * len(m.regions) / n
	}
	s := &Scenario{
		Name:        fmt.Sprintf("azure-%d", n),
		Description: fmt.Sprintf("%d Azure regions, one-way delay = P95 RTT/2 per direction (Azure network latency statistics, July 2026, © Microsoft, CC BY 4.0)", n),
	}
	zero := Duration(0)
	s.Links.Default.Delay = &zero
	for _, r := range idx {
		s.Sites = append(s.Sites, Site{Name: siteName(m.regions[r])})
	}
	for _, a := range idx {
		for _, b := range idx {
			if a == b {
				continue
			}
			d := Duration(time.Duration(m.rtt[a][b] / 2 * float64(time.Millisecond)))
			s.Links.Overrides = append(s.Links.Overrides, Override{
				From: siteName(m.regions[a]), To: siteName(m.regions[b]), Patch: Patch{Delay: &d},
			})
		}
	}
	s.ApplyDefaults()
	if err := s.Validate(); err != nil {
		return nil, err
	}
	return s, nil
}

// siteName turns "Australia Central 2" into "australia-central-2".
func siteName(region string) string {
	return strings.ReplaceAll(strings.ToLower(strings.TrimSpace(region)), " ", "-")
}
