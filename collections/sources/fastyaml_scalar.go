package sources

import (
	"bytes"
	"regexp"
	"strconv"
	"strings"
	"unicode/utf8"
)

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
