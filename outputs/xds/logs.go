package xds

import (
	"sync"
	"time"

	"github.com/krteds/krteds/collections"
)

// maxClientText bounds any text a client sent (node id, NACK detail) in logs and statuses.
const maxClientText = 256

// clip shortens client-supplied text to maxClientText bytes, saying how much was cut.
func clip(s string) string { return collections.Truncate(s, maxClientText) }

// limiter lets a few lines be logged, then one per interval, counting what it held back. The
// zero value allows logBurst lines, then one per logInterval.
type limiter struct {
	// burst and every, when set, replace logBurst and logInterval.
	burst      float64
	every      time.Duration
	mu         sync.Mutex
	tokens     float64
	last       time.Time
	suppressed int
}

const (
	logBurst    = 5
	logInterval = 10 * time.Second
)

// allow reports whether a line may be logged now, and how many were held back before it.
func (l *limiter) allow(now time.Time) (bool, int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	burst, every := l.burst, l.every
	if burst == 0 {
		burst, every = logBurst, logInterval
	}
	if l.last.IsZero() {
		l.tokens = burst
	} else {
		l.tokens = min(burst, l.tokens+now.Sub(l.last).Seconds()/every.Seconds())
	}
	l.last = now
	if l.tokens < 1 {
		l.suppressed++
		return false, 0
	}
	l.tokens--
	n := l.suppressed
	l.suppressed = 0
	return true, n
}

// serverLogs limit, across streams, the lines any client can make the server write: a thousand
// clients refused, connecting or rejecting responses at once write a few dozen lines, each
// saying how many it stands for.
type serverLogs struct {
	refused, connects, disconnects, nacks, stale limiter
}

func newServerLogs() *serverLogs {
	l := &serverLogs{}
	for _, lim := range []*limiter{&l.refused, &l.connects, &l.disconnects, &l.nacks, &l.stale} {
		lim.burst, lim.every = 20, time.Second
	}
	return l
}
