package cli

import (
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/lmittmann/tint"
)

// newLogger makes the process logger: tint for a human at a terminal, JSON
// for machines. format is auto, text or json.
func newLogger(w io.Writer, format, level string) (*slog.Logger, error) {
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("--log-level %q: want debug, info, warn or error", level)
	}
	switch strings.ToLower(format) {
	case "auto":
		if isTerminal(w) {
			return slog.New(tint.NewHandler(w, &tint.Options{Level: lv, TimeFormat: time.TimeOnly})), nil
		}
		return slog.New(slog.NewJSONHandler(w, jsonOptions(lv))), nil
	case "text":
		return slog.New(tint.NewHandler(w, &tint.Options{Level: lv, TimeFormat: time.TimeOnly, NoColor: !isTerminal(w)})), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, jsonOptions(lv))), nil
	}
	return nil, fmt.Errorf("--log-format %q: want auto, text or json", format)
}

// jsonOptions writes durations as Go writes them ("2s", "1m30s"), as the
// flags and the config take them: slog's JSON handler writes nanoseconds
// ("in":2000000000), which an operator reading a warning has to count.
func jsonOptions(lv slog.Level) *slog.HandlerOptions {
	return &slog.HandlerOptions{Level: lv, ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
		if a.Value.Kind() == slog.KindDuration {
			a.Value = slog.StringValue(a.Value.Duration().String())
		}
		return a
	}}
}

// syncWriter serialises writes to w: a command that runs a stack writes to
// stderr from its own goroutine while the stack's goroutines log there.
type syncWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (s *syncWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(p)
}

func isTerminal(w io.Writer) bool {
	if s, ok := w.(*syncWriter); ok {
		w = s.w
	}
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}
