package config

import (
	"errors"
	"fmt"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/detour-overlay/detour/internal/yamlpath"
)

// ErrInvalid is matched (errors.Is) by every validation error.
var ErrInvalid = errors.New("invalid configuration")

// FieldError names the field at fault and, when known, its line.
type FieldError struct {
	Field string
	Line  int
	Msg   string
	// unknown is the path an unknown key would have (a misspelt field): it
	// explains a "missing" problem of a field spelt nearly the same.
	unknown string
}

func (e *FieldError) Error() string {
	switch {
	case e.Field == "" && e.Line > 0:
		return fmt.Sprintf("line %d: %s", e.Line, e.Msg)
	case e.Field == "":
		return e.Msg // a YAML error, which names its own line
	case e.Line > 0:
		return fmt.Sprintf("line %d: %s: %s", e.Line, e.Field, e.Msg)
	}
	return fmt.Sprintf("%s: %s", e.Field, e.Msg)
}

// Is makes every FieldError match ErrInvalid.
func (e *FieldError) Is(target error) bool { return target == ErrInvalid }

// Problems is every mistake found in one configuration, in the order of
// the file's lines once Parse has placed them. errors.As finds the first.
type Problems []*FieldError

// Error is the one problem, or the count followed by the problems one per
// indented line.
func (p Problems) Error() string {
	if len(p) == 1 {
		return p[0].Error()
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%d problems:", len(p))
	for _, e := range p {
		b.WriteString("\n  ")
		b.WriteString(e.Error())
	}
	return b.String()
}

// Unwrap lets errors.Is and errors.As see each problem.
func (p Problems) Unwrap() []error {
	errs := make([]error, len(p))
	for i, e := range p {
		errs[i] = e
	}
	return errs
}

func (p *Problems) add(field, format string, args ...any) {
	*p = append(*p, &FieldError{Field: field, Msg: fmt.Sprintf(format, args...)})
}

// err returns the problems as an error, or nil when there are none.
func (p Problems) err() error {
	if len(p) == 0 {
		return nil
	}
	return p
}

// place gives each problem the line of its field in root, drops a problem
// on a line that a decoding error already names (a value that could not be
// read leaves its field empty, and "missing" would only repeat the
// mistake), and sorts them by line.
func (p Problems) place(root *yaml.Node, decoded Problems) Problems {
	taken := map[int]bool{}
	var misspelt []string
	for _, e := range decoded {
		taken[e.Line] = true
		if e.unknown != "" {
			misspelt = append(misspelt, e.unknown)
		}
	}
	explained := func(e *FieldError) bool {
		if e.Line != 0 && taken[e.Line] {
			return true
		}
		return strings.HasPrefix(e.Msg, "missing") && slices.ContainsFunc(misspelt, func(m string) bool {
			return nearlySame(m, e.Field)
		})
	}
	all := slices.Clone(decoded)
	for _, e := range p {
		e.Line = yamlpath.Line(root, e.Field)
		if !explained(e) {
			all = append(all, e)
		}
	}
	slices.SortStableFunc(all, func(a, b *FieldError) int { return a.Line - b.Line })
	return all
}

var (
	// lineMsg matches one of the YAML decoder's messages.
	lineMsg = regexp.MustCompile(`^line (\d+): (.*)$`)
	// unknownField matches the YAML decoder's report of an unknown key.
	unknownField = regexp.MustCompile(`^field (\S+) not found in type (\S+)$`)
	// cannotRead matches a value of the wrong kind.
	cannotRead = regexp.MustCompile("^cannot unmarshal !!(\\w+) `(.*)` into (\\S+)$")
	// cannotReadNode matches a list or mapping where a value was expected.
	cannotReadNode = regexp.MustCompile(`^cannot unmarshal !!(seq|map) into (\S+)$`)
)

// decodeProblems turns the YAML decoder's type errors (several per
// document: unknown keys, values of the wrong kind) into problems that
// name field and line.
func decodeProblems(root *yaml.Node, te *yaml.TypeError) Problems {
	var p Problems
	for _, m := range te.Errors {
		sub := lineMsg.FindStringSubmatch(m)
		if sub == nil {
			p = append(p, &FieldError{Msg: m})
			continue
		}
		line, _ := strconv.Atoi(sub[1])
		e := &FieldError{Line: line, Field: yamlpath.PathAt(root, line, 0), Msg: sub[2]}
		if u := unknownField.FindStringSubmatch(sub[2]); u != nil {
			e.unknown = e.Field
			e.Field, e.Msg = "", fmt.Sprintf("unknown field %q", u[1])
			if near := nearestField(u[2], u[1]); near != "" {
				e.Msg += fmt.Sprintf(" (did you mean %q?)", near)
			}
		} else if c := cannotRead.FindStringSubmatch(sub[2]); c != nil {
			e.Msg = wrongKind(c[1], c[2], c[3])
		} else if c := cannotReadNode.FindStringSubmatch(sub[2]); c != nil {
			e.Msg = wrongKind(c[1], "", c[2])
			if f := pathOfKind(docBodyOf(root), line, c[1], ""); f != "" {
				e.Field = f // a list or mapping in a one-line {flow} mapping
			}
		}
		p = append(p, e)
	}
	return p
}

// sections are the configuration's structs by the names the YAML decoder
// gives them, for suggesting the field a misspelt key meant.
var sections = map[string]reflect.Type{
	"config.Agent":   reflect.TypeFor[Agent](),
	"config.Peer":    reflect.TypeFor[Peer](),
	"config.Network": reflect.TypeFor[Network](),
}

// nearestField returns the YAML key of struct typeName within two edits of
// key, or "".
func nearestField(typeName, key string) string {
	t, ok := sections[typeName]
	if !ok {
		return ""
	}
	best, bestD := "", 3
	for f := range t.Fields() {
		name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		if d := editDistance(key, name); name != "" && d < bestD {
			best, bestD = name, d
		}
	}
	return best
}

// nearlySame reports whether two field paths are in the same mapping and
// their last keys differ by at most two edits ("adress" for "address").
func nearlySame(a, b string) bool {
	i, j := strings.LastIndexByte(a, '.'), strings.LastIndexByte(b, '.')
	if a[:i+1] != b[:j+1] {
		return false
	}
	return editDistance(a[i+1:], b[j+1:]) <= 2
}

// editDistance is the Levenshtein distance between two short keys.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur := make([]int, len(b)+1)
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev = cur
	}
	return prev[len(b)]
}

// wrongKind explains a value of YAML kind tag that cannot become a Go
// value of type goType.
func wrongKind(tag, value, goType string) string {
	switch {
	case goType == "time.Duration":
		return fmt.Sprintf("%q is not a duration: give a number with a unit (100ms, 2s, 1m)", value)
	case strings.HasPrefix(goType, "int") || strings.HasPrefix(goType, "uint"):
		return fmt.Sprintf("%q is not a whole number", value)
	case goType == "string":
		return fmt.Sprintf("a %s where text was expected", tagName(tag))
	case strings.HasPrefix(goType, "[]"):
		return fmt.Sprintf("a %s where a list was expected", tagName(tag))
	case strings.HasPrefix(goType, "config."):
		return fmt.Sprintf("a %s where a mapping of fields was expected", tagName(tag))
	}
	return fmt.Sprintf("cannot read %q as %s", value, goType)
}

func tagName(tag string) string {
	switch tag {
	case "str", "int", "float", "bool", "null":
		return "single value"
	case "map":
		return "mapping"
	case "seq":
		return "list"
	}
	return tag
}

// yamlMessage turns a YAML syntax error, which may span several lines,
// into one line.
func yamlMessage(err error) string {
	var parts []string
	for _, l := range strings.Split(err.Error(), "\n") {
		l = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(l), "yaml: "))
		if l != "" {
			parts = append(parts, l)
		}
	}
	return strings.Join(parts, "; ")
}

// docBodyOf returns the document's top node.
func docBodyOf(root *yaml.Node) *yaml.Node {
	if root != nil && root.Kind == yaml.DocumentNode && len(root.Content) > 0 {
		return root.Content[0]
	}
	return root
}

// pathOfKind returns the path of the first mapping value on line that is
// a list (tag seq) or a mapping (tag map), or "": the field a value of
// the wrong kind was given to, which PathAt (scalars only) cannot find
// when the line holds a flow mapping.
func pathOfKind(n *yaml.Node, line int, tag, path string) string {
	if n == nil {
		return ""
	}
	want := map[string]yaml.Kind{"seq": yaml.SequenceNode, "map": yaml.MappingNode}[tag]
	if want == 0 {
		return ""
	}
	switch n.Kind {
	case yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			sub := k.Value
			if path != "" {
				sub = path + "." + k.Value
			}
			if p := pathOfKind(v, line, tag, sub); p != "" {
				return p // the innermost one
			}
			if v.Kind == want && v.Line == line {
				return sub
			}
		}
	case yaml.SequenceNode:
		for i, c := range n.Content {
			if p := pathOfKind(c, line, tag, fmt.Sprintf("%s[%d]", path, i)); p != "" {
				return p
			}
		}
	}
	return ""
}
