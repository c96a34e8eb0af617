package main

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"sync"
	"time"
)

// retryNoteEvery is how often the same retry note is repeated while the
// library keeps retrying.
const retryNoteEvery = 30 * time.Second

// retryNotes is the client's logger without --verbose: it prints on stderr
// only the library's warnings that it is retrying (the database unreachable
// while lock, elect or queue lock wait, or while follow reads), which
// would otherwise leave the command waiting in silence. Each message is
// printed once, then again at most every retryNoteEvery.
type retryNotes struct {
	w    io.Writer
	mu   *sync.Mutex
	last map[string]time.Time
}

func newRetryNotes(w io.Writer) *retryNotes {
	return &retryNotes{w: w, mu: new(sync.Mutex), last: map[string]time.Time{}}
}

func (h *retryNotes) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelWarn }

func (h *retryNotes) Handle(_ context.Context, r slog.Record) error {
	if !strings.HasSuffix(r.Message, "retrying") {
		return nil
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if t, ok := h.last[r.Message]; ok && r.Time.Sub(t) < retryNoteEvery {
		return nil
	}
	h.last[r.Message] = r.Time
	line := "sentinel: " + strings.TrimPrefix(r.Message, "sentinel: ")
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == "err" {
			// pgx's connection errors span lines, one per address tried.
			line += " (" + strings.Join(strings.Fields(a.Value.String()), " ") + ")"
		}
		return true
	})
	fprintln(h.w, line+"; interrupt to stop")
	return nil
}

func (h *retryNotes) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *retryNotes) WithGroup(string) slog.Handler      { return h }
