package providers

import (
	"context"
	"log/slog"
)

// tokens is one token count of a response as a run's budgets take it. A
// negative count (a buggy or hostile OpenAI-compatible server) is counted
// as 0 and logged: taken as is, it would lower the run's token total and
// cost, and so talk its budgets down.
func tokens(ctx context.Context, log *slog.Logger, what, field string, n int64) int {
	if n < 0 {
		log.WarnContext(ctx, "model response reports a negative token count; counted as 0", "request", what, "field", field, "count", n)
		return 0
	}
	return int(n)
}

// warnNoUsage logs a response that reports no token usage at all: it is
// recorded as 0 tokens, so the token and cost budgets never bind on it.
func warnNoUsage(ctx context.Context, log *slog.Logger, what string) {
	log.WarnContext(ctx, "model response reports no token usage; recorded as 0, so token and cost budgets do not count it", "request", what)
}
