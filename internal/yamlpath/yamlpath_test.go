package yamlpath

import (
	"testing"

	"go.yaml.in/yaml/v3"
)

const doc = `site: a
peers:
  - name: b
    address: 198.18.0.2:1
  - name: c
    address: nowhere
`

func TestLineAndPathAt(t *testing.T) {
	var root yaml.Node
	if err := yaml.Unmarshal([]byte(doc), &root); err != nil {
		t.Fatal(err)
	}
	for field, want := range map[string]int{
		"site": 1, "peers": 3, "peers[1].address": 6, "peers[1].missing": 5, "peers[7].name": 3, "nothing": 1,
	} {
		if got := Line(&root, field); got != want {
			t.Errorf("Line(%q) = %d, want %d", field, got, want)
		}
	}
	if p := PathAt(&root, 6, 0); p != "peers[1].address" {
		t.Errorf("PathAt(6) = %q", p)
	}
	if p := PathAt(&root, 99, 0); p != "" {
		t.Errorf("PathAt(99) = %q, want none", p)
	}
}
