package outputs

import (
	"fmt"
	"os"
	"strings"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// LogLevels is a parsed --log-level: a default level and per-scope levels. Scopes are logger
// names ("xds", "graph", ...); a scope's level applies to its children too.
type LogLevels struct {
	Default zapcore.Level
	Scopes  map[string]zapcore.Level
}

// ParseLogLevels parses "info" or "info,xds=debug,graph=warn".
func ParseLogLevels(spec string) (LogLevels, error) {
	l := LogLevels{Default: zapcore.InfoLevel, Scopes: map[string]zapcore.Level{}}
	for _, part := range strings.Split(spec, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		scope, lvl, scoped := strings.Cut(part, "=")
		if !scoped {
			lvl = scope
		}
		parsed, err := zapcore.ParseLevel(lvl)
		if err != nil {
			return l, fmt.Errorf("log level %q: %w", part, err)
		}
		if scoped {
			l.Scopes[scope] = parsed
		} else {
			l.Default = parsed
		}
	}
	return l, nil
}

// Enabled reports whether a scope logs at lvl.
func (l LogLevels) Enabled(scope string, lvl zapcore.Level) bool {
	for s := scope; ; {
		if v, ok := l.Scopes[s]; ok {
			return lvl >= v
		}
		i := strings.LastIndex(s, ".")
		if i < 0 {
			break
		}
		s = s[:i]
	}
	return lvl >= l.Default
}

// Lowest is the most verbose level any scope uses.
func (l LogLevels) Lowest() zapcore.Level {
	m := l.Default
	for _, v := range l.Scopes {
		m = min(m, v)
	}
	return m
}

// scopedCore filters entries by their logger name's level.
type scopedCore struct {
	zapcore.Core
	levels LogLevels
}

func (c scopedCore) With(f []zapcore.Field) zapcore.Core {
	return scopedCore{Core: c.Core.With(f), levels: c.levels}
}

func (c scopedCore) Check(e zapcore.Entry, ce *zapcore.CheckedEntry) *zapcore.CheckedEntry {
	if !c.levels.Enabled(e.LoggerName, e.Level) {
		return ce
	}
	return c.Core.Check(e, ce)
}

// NewLogger builds krteds' structured logger on stderr: one line per event, console encoding,
// levels per scope.
func NewLogger(levels LogLevels) *zap.Logger {
	enc := zap.NewProductionEncoderConfig()
	enc.EncodeTime = zapcore.ISO8601TimeEncoder
	core := zapcore.NewCore(zapcore.NewConsoleEncoder(enc), zapcore.Lock(os.Stderr), levels.Lowest())
	return zap.New(scopedCore{Core: core, levels: levels}, zap.AddCaller())
}
