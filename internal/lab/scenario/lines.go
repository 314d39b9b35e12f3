package scenario

import (
	"go.yaml.in/yaml/v3"
)

// lineInfo keeps the parsed YAML tree so that Validate can name lines.
type lineInfo struct {
	root *yaml.Node
}
