package sources

import (
	"bytes"
	"unicode/utf8"
)

// fastYAMLToJSON converts a YAML document written in the plain block style manifests use
// (block mappings and sequences, flow collections on one line, plain and quoted scalars,
// comments) to JSON, an order of magnitude faster than the general YAML parser. For anything
// outside that subset (anchors, tags, block and multi-line scalars, floats, timestamps, keys
// that are not plain strings, duplicate keys, ...) ok is false and the caller uses the general
// parser; where it answers, it answers as sigs.k8s.io/yaml.YAMLToJSON does (FuzzFastYAML holds
// it to that), scalars resolved by YAML 1.1's rules as go-yaml v2 applies them.
func fastYAMLToJSON(doc []byte) (out []byte, ok bool) {
	var c yconv
	if !c.convert(doc) {
		return nil, false
	}
	return c.out, true
}

// convert converts doc into c.out.
func (c *yconv) convert(doc []byte) bool {
	if !printable(doc) {
		return false
	}
	c.out = make([]byte, 0, len(doc)+len(doc)/4)
	if !c.split(doc) || len(c.lines) == 0 || c.lines[0].indent != 0 {
		return false
	}
	return c.node(0) && c.i == len(c.lines)
}

// printable reports whether a document is valid UTF-8 of characters YAML allows (no control
// characters but newlines, no byte order mark); the general parser rejects the rest.
func printable(doc []byte) bool {
	for i := 0; i < len(doc); {
		c := doc[i]
		if c < utf8.RuneSelf {
			if (c < 0x20 && c != '\n' && c != '\r') || c == 0x7F || (c == '\r' && (i+1 == len(doc) || doc[i+1] != '\n')) {
				return false // a lone carriage return is a line break to YAML
			}
			i++
			continue
		}
		r, size := utf8.DecodeRune(doc[i:])
		// Not printable, or a line break to YAML 1.1 (NEL, LS, PS).
		if (r == utf8.RuneError && size == 1) || (r >= 0x80 && r <= 0x9F) || r == 0x2028 || r == 0x2029 || r == 0xFEFF || (r >= 0xD800 && r <= 0xDFFF) || r == 0xFFFE || r == 0xFFFF {
			return false
		}
		i += size
	}
	return true
}

type yline struct {
	indent int
	text   []byte
}

type yconv struct {
	lines []yline
	i     int
	out   []byte
	// depth is the number of collections (block or flow) open around the current node.
	depth int
	// compared counts the key comparisons of the duplicate checks (tests hold it linear).
	compared int
}

// maxFastDepth bounds the nesting of collections (block and flow together) the fast reader
// follows, and so its recursion: a manifest nests a few dozen deep at most, and a stack overflow
// is fatal in Go. A deeper document is left to the general parser, which has a bound of its own
// (go-yaml's 10000) and rejects it with its error.
const maxFastDepth = 100

// open enters a collection; false past maxFastDepth. The caller closes it (c.depth--) on success
// only: a failure abandons the conversion.
func (c *yconv) open() bool {
	c.depth++
	return c.depth <= maxFastDepth
}

// close ends the block node at indent with end ('}' or ']'): a line indented deeper than the
// node left over after it is not the fast path's to read.
func (c *yconv) close(indent int, end byte) bool {
	if c.i < len(c.lines) && c.lines[c.i].indent > indent {
		return false
	}
	c.out = append(c.out, end)
	c.depth--
	return true
}

// smallMapping is the number of keys up to which a mapping's duplicate check is a linear scan
// (most mappings are small); past it the keys go into a map, so that a wide mapping costs linear
// time instead of quadratic.
const smallMapping = 16

// keySet holds the keys of one mapping, to find duplicates.
type keySet struct {
	small [][]byte
	large map[string]struct{}
}

// fresh adds key to the set; false when it was there already.
func (c *yconv) fresh(s *keySet, key []byte) bool {
	if s.large != nil {
		c.compared++
		if _, dup := s.large[string(key)]; dup {
			return false
		}
		s.large[string(key)] = struct{}{}
		return true
	}
	for _, k := range s.small {
		c.compared++
		if bytes.Equal(k, key) {
			return false
		}
	}
	if len(s.small) < smallMapping {
		s.small = append(s.small, key)
		return true
	}
	s.large = make(map[string]struct{}, 4*smallMapping)
	for _, k := range s.small {
		s.large[string(k)] = struct{}{}
	}
	s.large[string(key)] = struct{}{}
	s.small = nil
	return true
}

// split cuts the document into lines without comments and trailing space, skipping blank ones.
func (c *yconv) split(doc []byte) bool {
	first := true
	for line := range bytes.Lines(doc) {
		line = bytes.TrimSuffix(bytes.TrimSuffix(line, []byte{'\n'}), []byte{'\r'})
		indent := 0
		for indent < len(line) && line[indent] == ' ' {
			indent++
		}
		text, ok := stripComment(line[indent:])
		if !ok {
			return false
		}
		if len(text) == 0 {
			continue
		}
		if indent == 0 {
			switch {
			case bytes.Equal(text, []byte("---")) && first:
				first = false
				continue
			case text[0] == '%' || bytes.HasPrefix(text, []byte("---")) || bytes.HasPrefix(text, []byte("...")):
				return false
			}
		}
		if text[0] == '\t' {
			return false
		}
		first = false
		c.lines = append(c.lines, yline{indent: indent, text: text})
	}
	return true
}

// stripComment removes a comment ('#' at the start or after a space, outside quotes) and
// trailing spaces; ok is false for a line it cannot read simply (a tab, an unterminated quote).
func stripComment(s []byte) ([]byte, bool) {
	var quote byte
	for i := 0; i < len(s); i++ {
		ch := s[i]
		switch {
		case ch == '\t':
			return nil, false
		case quote == '"' && ch == '\\':
			i++
		case quote != 0:
			if ch == quote {
				if quote == '\'' && i+1 < len(s) && s[i+1] == '\'' {
					i++
					continue
				}
				quote = 0
			}
		case ch == '"' || ch == '\'':
			// A quote opens a quoted scalar only where one may start.
			if i == 0 || bytes.IndexByte([]byte(" [{,:"), s[i-1]) >= 0 {
				quote = ch
			}
		case ch == '#' && (i == 0 || s[i-1] == ' '):
			s = s[:i]
		}
	}
	if quote != 0 {
		return nil, false
	}
	return bytes.TrimRight(s, " "), true
}

func isSeqItem(t []byte) bool { return t[0] == '-' && (len(t) == 1 || t[1] == ' ') }

// node converts the block node whose first line is lines[c.i], at indent.
func (c *yconv) node(indent int) bool {
	if c.i >= len(c.lines) || c.lines[c.i].indent != indent {
		return false
	}
	if isSeqItem(c.lines[c.i].text) {
		return c.seq(indent)
	}
	return c.mapping(indent)
}

func (c *yconv) mapping(indent int) bool {
	if !c.open() {
		return false
	}
	c.out = append(c.out, '{')
	var keys keySet
	for n := 0; c.i < len(c.lines) && c.lines[c.i].indent == indent; n++ {
		t := c.lines[c.i].text
		if isSeqItem(t) {
			return false
		}
		key, rest, ok := splitKey(t)
		if !ok {
			return false
		}
		if !c.fresh(&keys, key) {
			return false // go-yaml refuses duplicate keys; let it say so
		}
		if n > 0 {
			c.out = append(c.out, ',')
		}
		c.out = appendJSONString(c.out, key)
		c.out = append(c.out, ':')
		c.i++
		if !c.value(rest, indent, true) {
			return false
		}
	}
	return c.close(indent, '}')
}

func (c *yconv) seq(indent int) bool {
	if !c.open() {
		return false
	}
	c.out = append(c.out, '[')
	for n := 0; c.i < len(c.lines) && c.lines[c.i].indent == indent && isSeqItem(c.lines[c.i].text); n++ {
		if n > 0 {
			c.out = append(c.out, ',')
		}
		t := c.lines[c.i].text
		after := bytes.TrimLeft(t[1:], " ")
		if len(after) == 0 {
			c.i++
			if !c.value(nil, indent, false) {
				return false
			}
			continue
		}
		// "- key: value" or "- - item" starts a block node inside the item, at the column of its
		// first character: read it as if it were on a line of its own.
		col := indent + len(t) - len(after)
		if isSeqItem(after) || isKeyLine(after) {
			c.lines[c.i] = yline{indent: col, text: after}
			if !c.node(col) {
				return false
			}
			continue
		}
		c.i++
		if !c.scalarLine(after, indent) {
			return false
		}
	}
	return c.close(indent, ']')
}

func isKeyLine(t []byte) bool {
	_, _, ok := splitKey(t)
	return ok
}

// value converts what follows "key:" (rest) or "-": an inline scalar or flow collection, or the
// block node on the next lines. In a mapping, a sequence may sit at the key's own indent.
func (c *yconv) value(rest []byte, indent int, inMapping bool) bool {
	if len(rest) > 0 {
		return c.scalarLine(rest, indent)
	}
	if c.i < len(c.lines) {
		next := c.lines[c.i]
		if next.indent > indent {
			return c.node(next.indent)
		}
		if inMapping && next.indent == indent && isSeqItem(next.text) {
			return c.seq(indent)
		}
	}
	c.out = append(c.out, "null"...)
	return true
}

// scalarLine converts an inline scalar or flow collection; a deeper line after it would make it
// a multi-line scalar, which the simple reader does not take.
func (c *yconv) scalarLine(s []byte, indent int) bool {
	if c.i < len(c.lines) && c.lines[c.i].indent > indent {
		return false
	}
	var ok bool
	if s[0] == '{' || s[0] == '[' {
		var rest []byte
		if rest, ok = c.flow(s, false); ok && len(bytes.TrimLeft(rest, " ")) != 0 {
			return false
		}
		return ok
	}
	c.out, ok = appendScalar(c.out, s, false)
	return ok
}
