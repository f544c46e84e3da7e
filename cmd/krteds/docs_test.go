package main

import (
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"unicode"
)

// The README is what a newcomer reads to the end: what krteds is, how to try it, how it is built
// and how to add a transform. Everything else is in docs/, one page per reader.

// readmeMaxLines is how long the README may grow.
const readmeMaxLines = 260

// repoFile reads a file of the repository, by its path from the repository's root.
func repoFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", filepath.FromSlash(path)))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestREADMEIsShort: the README stays short enough to be read to the end.
func TestREADMEIsShort(t *testing.T) {
	if n := strings.Count(repoFile(t, "README.md"), "\n"); n > readmeMaxLines {
		t.Errorf("README.md has %d lines, more than %d: move what a newcomer does not need to the docs/ page of its reader", n, readmeMaxLines)
	}
}

// TestREADMETestCommandIsCIs: the test command of the README's "Try it" is the one CI runs.
func TestREADMETestCommandIsCIs(t *testing.T) {
	_, section, ok := strings.Cut(repoFile(t, "README.md"), "\n## Try it\n")
	if !ok {
		t.Fatal(`README.md has no "## Try it" section`)
	}
	section, _, _ = strings.Cut(section, "\n## ")
	const command = "go test ./..."
	if !strings.Contains(section, "```sh\n"+command+"\n```\n") {
		t.Errorf("the README's \"Try it\" has no block running %q", command)
	}
	found := false
	for line := range strings.Lines(repoFile(t, ".ci/run")) {
		found = found || strings.TrimSpace(line) == command
	}
	if !found {
		t.Errorf(".ci/run does not run %q, the README's test command", command)
	}
}

// TestFuzzTargetsDocumented: every target .ci/run fuzzes (`fuzz <package> <target>`, alone or in
// a `for t in ...; do fuzz <package> "$t"; done` loop) is named, with its package, in the
// Fuzzing section of docs/DEVELOPING.md, and that section names no target CI does not fuzz.
func TestFuzzTargetsDocumented(t *testing.T) {
	call := regexp.MustCompile(`^fuzz (\S+) (Fuzz\w+)$`)
	loop := regexp.MustCompile(`^for (\w+) in ([\w ]+); do fuzz (\S+) "\$(\w+)"; done$`)
	fuzzed := map[string]string{} // target → package
	for line := range strings.Lines(repoFile(t, ".ci/run")) {
		line = strings.TrimSpace(line)
		if m := call.FindStringSubmatch(line); m != nil {
			fuzzed[m[2]] = m[1]
		} else if m := loop.FindStringSubmatch(line); m != nil && m[1] == m[4] {
			for _, target := range strings.Fields(m[2]) {
				fuzzed[target] = m[3]
			}
		} else if strings.Contains(line, "fuzz ./") {
			t.Errorf(".ci/run: %q calls fuzz in a form this test does not read", line)
		}
	}
	if len(fuzzed) == 0 {
		t.Fatal(".ci/run fuzzes no target this test can read: the test reads nothing")
	}
	_, section, ok := strings.Cut(repoFile(t, "docs/DEVELOPING.md"), "\n## Fuzzing\n")
	if !ok {
		t.Fatal(`docs/DEVELOPING.md has no "## Fuzzing" section`)
	}
	section, _, _ = strings.Cut(section, "\n## ")
	for _, target := range slices.Sorted(maps.Keys(fuzzed)) {
		pkg := fuzzed[target]
		if !strings.Contains(section, "`"+target+"`") {
			t.Errorf("CI fuzzes %s (in %s); the Fuzzing section of docs/DEVELOPING.md does not name it", target, pkg)
		}
		if dir := strings.TrimPrefix(pkg, "./") + "/"; !strings.Contains(section, "`"+dir+"`") {
			t.Errorf("CI fuzzes %s in %s; the Fuzzing section of docs/DEVELOPING.md does not name `%s`", target, pkg, dir)
		}
	}
	for _, target := range regexp.MustCompile(`\bFuzz\w+`).FindAllString(section, -1) {
		if _, ok := fuzzed[target]; !ok {
			t.Errorf("the Fuzzing section of docs/DEVELOPING.md names %s, which .ci/run does not fuzz", target)
		}
	}
}

// TestDocsLinksResolve: every relative link of README.md and docs/*.md names a file or folder
// that exists and, with a #fragment, a heading of that file (its anchor as GitHub makes it).
func TestDocsLinksResolve(t *testing.T) {
	pages, err := filepath.Glob(filepath.Join("..", "..", "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	files := []string{"README.md"}
	for _, p := range pages {
		files = append(files, "docs/"+filepath.Base(p))
	}
	link := regexp.MustCompile(`\]\(([^)\s]+)\)`)
	links := 0
	for _, file := range files {
		for _, l := range markdownLines(repoFile(t, file)) {
			for _, m := range link.FindAllStringSubmatch(withoutCodeSpans(l.text), -1) {
				target := m[1]
				if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
					continue
				}
				links++
				path, fragment, _ := strings.Cut(target, "#")
				targetFile := file
				if path != "" {
					targetFile = filepath.ToSlash(filepath.Join(filepath.Dir(file), path))
					if strings.HasPrefix(targetFile, "../") {
						t.Errorf("%s:%d: %s leads out of the repository", file, l.number, target)
						continue
					}
					if _, err := os.Stat(filepath.Join("..", "..", filepath.FromSlash(targetFile))); err != nil {
						t.Errorf("%s:%d: %s: %v", file, l.number, target, err)
						continue
					}
				}
				if fragment == "" {
					continue
				}
				if !strings.HasSuffix(targetFile, ".md") {
					t.Errorf("%s:%d: %s: an anchor in a file that is not markdown", file, l.number, target)
					continue
				}
				if !headingAnchors(repoFile(t, targetFile))[fragment] {
					t.Errorf("%s:%d: %s: %s has no heading with the anchor #%s", file, l.number, target, targetFile, fragment)
				}
			}
		}
	}
	if links == 0 {
		t.Fatal("no relative link found: the test reads nothing")
	}
}

// markdownLine is a line of markdown outside fenced code blocks, with its line number.
type markdownLine struct {
	number int
	text   string
}

func markdownLines(text string) []markdownLine {
	var out []markdownLine
	fenced := false
	for i, line := range strings.Split(text, "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			fenced = !fenced
			continue
		}
		if !fenced {
			out = append(out, markdownLine{number: i + 1, text: line})
		}
	}
	return out
}

// withoutCodeSpans blanks the content of `code spans`, which are never links.
func withoutCodeSpans(line string) string {
	return regexp.MustCompile("`[^`]*`").ReplaceAllString(line, "``")
}

// headingAnchors is the set of anchors GitHub gives a markdown file's headings: lowercased,
// punctuation dropped, spaces made dashes, a repeated anchor numbered -1, -2, ...
func headingAnchors(text string) map[string]bool {
	anchors := map[string]bool{}
	seen := map[string]int{}
	for _, l := range markdownLines(text) {
		heading := strings.TrimLeft(l.text, "#")
		if len(heading) == len(l.text) || len(l.text)-len(heading) > 6 || !strings.HasPrefix(heading, " ") {
			continue
		}
		var b strings.Builder
		for _, r := range strings.ToLower(strings.TrimSpace(heading)) {
			switch {
			case unicode.IsLetter(r), unicode.IsDigit(r), r == '-', r == '_':
				b.WriteRune(r)
			case r == ' ':
				b.WriteByte('-')
			}
		}
		anchor := b.String()
		if n := seen[anchor]; n > 0 {
			anchors[anchor+"-"+strconv.Itoa(n)] = true
		} else {
			anchors[anchor] = true
		}
		seen[anchor]++
	}
	return anchors
}
