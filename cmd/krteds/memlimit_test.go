package main

import (
	"os"
	"path/filepath"
	"runtime/debug"
	"testing"
)

// TestMemoryLimitFromTheCgroup: the container's limit (cgroup v2 or v1) becomes the runtime's
// soft limit at 90 %, and the send budget's default a quarter of it; "max" or v1's huge number is
// no limit.
func TestMemoryLimitFromTheCgroup(t *testing.T) {
	if os.Getenv("GOMEMLIMIT") != "" {
		t.Skip("GOMEMLIMIT is set: it decides")
	}
	defer debug.SetMemoryLimit(debug.SetMemoryLimit(-1))
	dir := t.TempDir()
	write := func(name, v string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(v+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	for _, tc := range []struct {
		content string
		limit   int64
	}{
		{"2147483648", 2 << 30},
		{"max", 0},
		{"9223372036854771712", 0}, // cgroup v1 without a limit
	} {
		f := write("memory.max", tc.content)
		limit, _, err := memoryLimit([]string{filepath.Join(dir, "absent"), f})
		if err != nil || limit != tc.limit {
			t.Errorf("%q: limit %d (%v), want %d", tc.content, limit, err, tc.limit)
		}
		if tc.limit > 0 {
			if soft := debug.SetMemoryLimit(-1); soft != tc.limit/10*9 {
				t.Errorf("%q: soft limit %d, want %d", tc.content, soft, tc.limit/10*9)
			}
			if b := sendBudgetFor(limit); b != tc.limit/4 {
				t.Errorf("%q: budget %d, want %d", tc.content, b, tc.limit/4)
			}
		}
	}
	if _, _, err := memoryLimit([]string{write("bad", "lots")}); err == nil {
		t.Error("an unreadable limit is not an error")
	}
	if b := sendBudgetFor(0); b != 1<<30 {
		t.Errorf("without a limit the budget is %d, want 1 GiB", b)
	}
	if b := sendBudgetFor(128 << 20); b != 64<<20 {
		t.Errorf("under 128 MiB the budget is %d, want 64 MiB", b)
	}
}
