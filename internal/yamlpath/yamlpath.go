// Package yamlpath maps between dotted field paths ("peers[1].address")
// and positions in a decoded YAML document, so that configuration and
// scenario errors name both the field and its line.
package yamlpath

import (
	"fmt"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// Line finds the line of a dotted field path such as
// "links.overrides[1].rate" in a decoded document, or of the closest parent
// that exists, so that a validation error can name its line.
func Line(root *yaml.Node, field string) int {
	n := docBody(root)
	line := n.Line
	for _, part := range strings.Split(field, ".") {
		key, idx := splitIndex(part)
		next := mapValue(n, key)
		if next == nil {
			return line
		}
		line, n = next.Line, next
		if idx >= 0 {
			if n.Kind != yaml.SequenceNode || idx >= len(n.Content) {
				return line
			}
			n = n.Content[idx]
			line = n.Line
		}
	}
	return line
}

// splitIndex splits "overrides[3]" into "overrides" and 3 (or -1).
func splitIndex(part string) (string, int) {
	i := strings.IndexByte(part, '[')
	if i < 0 || !strings.HasSuffix(part, "]") {
		return part, -1
	}
	idx, err := strconv.Atoi(part[i+1 : len(part)-1])
	if err != nil {
		return part, -1
	}
	return part[:i], idx
}

func docBody(root *yaml.Node) *yaml.Node {
	if root.Kind == yaml.DocumentNode && len(root.Content) > 0 {
		return root.Content[0]
	}
	return root
}

// mapValue returns the value node of key in a mapping, following inline
// (merged) keys is not needed by the format.
func mapValue(n *yaml.Node, key string) *yaml.Node {
	if n.Kind != yaml.MappingNode {
		return nil
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == key {
			return n.Content[i+1]
		}
	}
	return nil
}

// PathAt returns the dotted path of the scalar value at a line (and
// column, unless 0), so that a decoding error can name its field.
func PathAt(root *yaml.Node, line, col int) string {
	p, _ := findLine(docBody(root), line, col, "")
	return p
}

func findLine(n *yaml.Node, line, col int, path string) (string, bool) {
	switch n.Kind {
	case yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			sub := k.Value
			if path != "" {
				sub = path + "." + k.Value
			}
			if v.Kind == yaml.ScalarNode && v.Line == line && (col == 0 || v.Column == col) {
				return sub, true
			}
			if p, ok := findLine(v, line, col, sub); ok {
				return p, true
			}
		}
	case yaml.SequenceNode:
		for i, c := range n.Content {
			sub := fmt.Sprintf("%s[%d]", path, i)
			if c.Kind == yaml.ScalarNode && c.Line == line && (col == 0 || c.Column == col) {
				return sub, true
			}
			if p, ok := findLine(c, line, col, sub); ok {
				return p, true
			}
		}
	}
	return "", false
}
