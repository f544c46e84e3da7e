package sources

import (
	"bytes"
	"regexp"
	"strconv"
	"strings"
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
	if c.i < len(c.lines) && c.lines[c.i].indent > indent {
		return false
	}
	c.out = append(c.out, '}')
	c.depth--
	return true
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
	if c.i < len(c.lines) && c.lines[c.i].indent > indent {
		return false
	}
	c.out = append(c.out, ']')
	c.depth--
	return true
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

// flow converts one flow collection or scalar at the start of s, returning what follows it. Only
// a mapping's value may be empty.
func (c *yconv) flow(s []byte, mapValue bool) ([]byte, bool) {
	s = bytes.TrimLeft(s, " ")
	if len(s) == 0 {
		return nil, false
	}
	switch s[0] {
	case '{', '[':
		if !c.open() {
			return nil, false
		}
		open, closing := s[0], byte('}')
		if open == '[' {
			closing = ']'
		}
		c.out = append(c.out, open)
		s = bytes.TrimLeft(s[1:], " ")
		if len(s) > 0 && s[0] == closing {
			c.out = append(c.out, closing)
			c.depth--
			return s[1:], true
		}
		var keys keySet
		for n := 0; ; n++ {
			if n > 0 {
				c.out = append(c.out, ',')
			}
			if open == '{' {
				var key []byte
				var ok bool
				if key, s, ok = flowKey(s); !ok {
					return nil, false
				}
				if !c.fresh(&keys, key) {
					return nil, false
				}
				c.out = appendJSONString(c.out, key)
				c.out = append(c.out, ':')
			}
			var ok bool
			if s, ok = c.flow(s, open == '{'); !ok {
				return nil, false
			}
			s = bytes.TrimLeft(s, " ")
			if len(s) == 0 {
				return nil, false
			}
			if s[0] == closing {
				c.out = append(c.out, closing)
				c.depth--
				return s[1:], true
			}
			if s[0] != ',' {
				return nil, false
			}
			s = bytes.TrimLeft(s[1:], " ")
			if len(s) == 0 || s[0] == closing {
				return nil, false // a trailing comma: let the real parser judge
			}
		}
	case '"', '\'':
		end := quotedEnd(s)
		if end < 0 {
			return nil, false
		}
		var ok bool
		c.out, ok = appendScalar(c.out, s[:end], true)
		return s[end:], ok
	}
	end := 0
	for end < len(s) && bytes.IndexByte([]byte(",]}"), s[end]) < 0 && !(s[end] == ':' && (end+1 == len(s) || s[end+1] == ' ')) {
		end++
	}
	v := bytes.TrimRight(s[:end], " ")
	if len(v) == 0 && !mapValue {
		return nil, false
	}
	var ok bool
	c.out, ok = appendScalar(c.out, v, true)
	return s[end:], ok
}

// plainFlow reports whether a plain scalar inside a flow collection is made of unremarkable
// characters only (the flow reader takes nothing else).
func plainFlow(s []byte) bool {
	for i, ch := range s {
		ok := ch >= 'a' && ch <= 'z' || ch >= 'A' && ch <= 'Z' || ch >= '0' && ch <= '9' || ch == '-' || ch == '_' || ch == '.' || ch == '/' ||
			(ch == ' ' && i > 0 && s[i-1] != ' ') || (ch == ':' && i+1 < len(s) && s[i+1] != ' ')
		if !ok {
			return false
		}
	}
	return true
}

// flowKey reads "key: " inside a flow mapping.
func flowKey(s []byte) (key, rest []byte, ok bool) {
	s = bytes.TrimLeft(s, " ")
	if len(s) == 0 {
		return nil, nil, false
	}
	if s[0] == '"' || s[0] == '\'' {
		end := quotedEnd(s)
		if end < 0 {
			return nil, nil, false
		}
		key, ok = unquote(s[:end])
		s = s[end:]
	} else {
		end := 0
		for end < len(s) && s[end] != ':' && bytes.IndexByte([]byte(",[]{}"), s[end]) < 0 {
			end++
		}
		key, s = bytes.TrimRight(s[:end], " "), s[end:]
		ok = plainKey(key) && plainFlow(key)
	}
	if !ok || len(s) < 2 || s[0] != ':' || s[1] != ' ' || len(key) > maxSimpleKey {
		return nil, nil, false
	}
	return key, s[2:], true
}

// maxSimpleKey is (with a margin) YAML's bound on an implicit key: 1024 characters.
const maxSimpleKey = 1000

// quotedEnd is the index just after the quoted scalar starting s, or -1.
func quotedEnd(s []byte) int {
	q := s[0]
	for i := 1; i < len(s); i++ {
		switch {
		case q == '"' && s[i] == '\\':
			i++
		case s[i] == q:
			if q == '\'' && i+1 < len(s) && s[i+1] == '\'' {
				i++
				continue
			}
			return i + 1
		}
	}
	return -1
}

// splitKey splits "key: rest" (or "key:") of a block mapping line.
func splitKey(t []byte) (key, rest []byte, ok bool) {
	var k []byte
	var after []byte
	if t[0] == '"' || t[0] == '\'' {
		end := quotedEnd(t)
		if end < 0 {
			return nil, nil, false
		}
		if k, ok = unquote(t[:end]); !ok {
			return nil, nil, false
		}
		after = t[end:]
	} else {
		i := 0
		for i < len(t) && !(t[i] == ':' && (i+1 == len(t) || t[i+1] == ' ')) {
			i++
		}
		if i == len(t) {
			return nil, nil, false
		}
		k, after = t[:i], t[i:]
		if !plainKey(k) {
			return nil, nil, false
		}
	}
	if len(after) == 0 || after[0] != ':' || (len(after) > 1 && after[1] != ' ') || len(t)-len(after) > maxSimpleKey {
		return nil, nil, false
	}
	return k, bytes.TrimLeft(after[1:], " "), true
}

// plainKey reports whether a plain scalar is a key YAML reads as exactly that string.
func plainKey(k []byte) bool {
	if len(k) == 0 || bytes.IndexByte([]byte("-?:,[]{}#&*!|>'\"%@`=<+.~0123456789"), k[0]) >= 0 {
		return false
	}
	if bytes.ContainsAny(k, "#{}[],") || k[len(k)-1] == ' ' {
		return false
	}
	_, special := yamlWords[string(k)]
	return !special
}

// yamlWords are the plain scalars go-yaml v2 does not read as strings.
var yamlWords = map[string]string{
	"y": "true", "Y": "true", "yes": "true", "Yes": "true", "YES": "true", "true": "true", "True": "true", "TRUE": "true",
	"on": "true", "On": "true", "ON": "true",
	"n": "false", "N": "false", "no": "false", "No": "false", "NO": "false", "false": "false", "False": "false", "FALSE": "false",
	"off": "false", "Off": "false", "OFF": "false",
	"~": "null", "null": "null", "Null": "null", "NULL": "null",
}

// appendScalar writes a scalar as JSON; ok is false where the resolution is not simple.
func appendScalar(out, s []byte, inFlow bool) ([]byte, bool) {
	if len(s) == 0 {
		return append(out, "null"...), true
	}
	switch s[0] {
	case '"', '\'':
		if quotedEnd(s) != len(s) {
			return out, false
		}
		v, ok := unquote(s)
		if !ok {
			return out, false
		}
		return appendJSONString(out, v), true
	}
	if w, ok := yamlWords[string(s)]; ok {
		return append(out, w...), true
	}
	if bytes.IndexByte([]byte("?:,[]{}#&*!|>%@`=<.+"), s[0]) >= 0 || (s[0] == '-' && (len(s) == 1 || s[1] == ' ')) {
		return out, false
	}
	if bytes.Contains(s, []byte(": ")) || bytes.Contains(s, []byte(" #")) || s[len(s)-1] == ':' {
		return out, false
	}
	if inFlow && !plainFlow(s) {
		return out, false
	}
	if c := s[0]; c == '-' || (c >= '0' && c <= '9') {
		switch v2Number(s) {
		case numNone:
			return appendJSONString(out, s), true
		case numDecimal:
			return append(out, s...), true
		}
		return out, false // another kind of number, or a timestamp: the general parser decides
	}
	return appendJSONString(out, s), true
}

const (
	numNone    = iota // a string
	numDecimal        // a plain decimal integer, written the same in JSON
	numOther          // some other number or timestamp
)

// v2Number says how go-yaml v2 resolves a plain scalar that starts with a digit or a sign
// (resolve.go: timestamps, integers in any base, YAML floats, binary).
func v2Number(s []byte) int {
	str := string(s)
	digits := 0
	for digits < len(str) && str[digits] >= '0' && str[digits] <= '9' {
		digits++
	}
	if digits == 4 && len(str) > 4 && str[4] == '-' {
		return numOther // may be a timestamp
	}
	plain := strings.ReplaceAll(str, "_", "")
	_, errInt := strconv.ParseInt(plain, 0, 64)
	_, errUint := strconv.ParseUint(plain, 0, 64)
	if errInt == nil || errUint == nil {
		neg := strings.HasPrefix(str, "-")
		d := strings.TrimPrefix(str, "-")
		if d != "" && len(d) <= 18 && strings.Trim(d, "0123456789") == "" && (d[0] != '0' || d == "0") && !(neg && d == "0") {
			return numDecimal
		}
		return numOther
	}
	if yamlFloat.MatchString(plain) || strings.HasPrefix(plain, "0b") || strings.HasPrefix(plain, "-0b") {
		return numOther
	}
	return numNone
}

// yamlFloat is go-yaml v2's yamlStyleFloat.
var yamlFloat = regexp.MustCompile(`^[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?$`)

// unquote reads a single- or double-quoted scalar (on one line).
func unquote(s []byte) ([]byte, bool) {
	if s[0] == '\'' {
		return bytes.ReplaceAll(s[1:len(s)-1], []byte("''"), []byte("'")), true
	}
	body := s[1 : len(s)-1]
	if bytes.IndexByte(body, '\\') < 0 {
		return body, true
	}
	out := make([]byte, 0, len(body))
	for i := 0; i < len(body); i++ {
		if body[i] != '\\' {
			out = append(out, body[i])
			continue
		}
		i++
		if i >= len(body) {
			return nil, false
		}
		switch body[i] {
		case '\\', '"', '/':
			out = append(out, body[i])
		case 'n':
			out = append(out, '\n')
		case 't':
			out = append(out, '\t')
		case 'r':
			out = append(out, '\r')
		case 'u':
			if i+4 >= len(body) {
				return nil, false
			}
			r, err := strconv.ParseUint(string(body[i+1:i+5]), 16, 32)
			if err != nil || (r >= 0xD800 && r <= 0xDFFF) {
				return nil, false
			}
			out = utf8.AppendRune(out, rune(r))
			i += 4
		default:
			return nil, false
		}
	}
	return out, true
}

// appendJSONString writes s as a JSON string.
func appendJSONString(out, s []byte) []byte {
	out = append(out, '"')
	for i := 0; i < len(s); {
		c := s[i]
		if c >= 0x20 && c != '"' && c != '\\' && c < utf8.RuneSelf {
			out = append(out, c)
			i++
			continue
		}
		if c >= utf8.RuneSelf {
			r, size := utf8.DecodeRune(s[i:])
			if r == utf8.RuneError && size == 1 {
				out = append(out, `\ufffd`...)
			} else {
				out = append(out, s[i:i+size]...)
			}
			i += size
			continue
		}
		switch c {
		case '"', '\\':
			out = append(out, '\\', c)
		case '\n':
			out = append(out, '\\', 'n')
		case '\t':
			out = append(out, '\\', 't')
		case '\r':
			out = append(out, '\\', 'r')
		default:
			out = append(out, `\u00`...)
			out = append(out, "0123456789abcdef"[c>>4], "0123456789abcdef"[c&15])
		}
		i++
	}
	return append(out, '"')
}
