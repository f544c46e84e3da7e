package main

import (
	"fmt"
	"math"
	"os"
	"runtime/debug"
	"strconv"
	"strings"
)

// cgroupMemoryFiles hold the container's memory limit: cgroup v2, then v1.
var cgroupMemoryFiles = []string{"/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"}

// memoryLimit is the memory krteds may use and where that comes from: GOMEMLIMIT when set, else
// the container's cgroup limit, which then becomes the runtime's soft limit at 90 % (the rest
// for what the runtime does not count: stacks it has not grown, the binary, the kernel's socket
// buffers). 0 when there is none.
func memoryLimit(files []string) (limit int64, source string, err error) {
	if os.Getenv("GOMEMLIMIT") != "" {
		return debug.SetMemoryLimit(-1), "GOMEMLIMIT", nil
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		v := strings.TrimSpace(string(b))
		if v == "max" {
			return 0, "", nil
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return 0, "", fmt.Errorf("reading the memory limit in %s: %w", f, err)
		}
		// cgroup v1 writes a huge number (the page-rounded maximum) for no limit.
		if n <= 0 || n >= math.MaxInt64/2 {
			return 0, "", nil
		}
		debug.SetMemoryLimit(n / 10 * 9)
		return n, "cgroup " + f, nil
	}
	return 0, "", nil
}

// sendBudgetFor is the default send budget under a memory limit: a quarter of it, between 64 MiB
// and 4 GiB; 1 GiB without a limit.
func sendBudgetFor(limit int64) int64 {
	if limit <= 0 {
		return 1 << 30
	}
	return min(max(limit/4, 64<<20), 4<<30)
}
