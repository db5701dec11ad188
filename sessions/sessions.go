// Package sessions is loopgate's conversation memory across runs. A task
// that names a session_id starts from what the session's earlier runs were
// asked and answered, kept in the loopgate_sessions KV bucket and bounded by
// a byte budget. It is deliberately apart from a run's work state (its
// events) and from any long-term memory: it holds what was said, compacted;
// the events hold what was done.
//
// Compaction, when a session outgrows its budget: tool results go first
// (they are the stalest and bulkiest), then the oldest exchanges are folded
// into a summary by a pluggable Summarizer. Structured constraints are
// fields, never prose: they are kept whole.
package sessions

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/loopgate/loopgate/events"
	"github.com/loopgate/loopgate/internal/wait"
)

// Session is one session's memory.
type Session struct {
	Tenant  string `json:"tenant"`
	ID      string `json:"id"`
	Summary string `json:"summary,omitempty"`
	// SummaryTainted: the summary folded in a tainted turn. It stays set:
	// the summary may carry the turn's text for as long as it lives.
	SummaryTainted bool                 `json:"summary_tainted,omitempty"`
	Turns          []events.SessionTurn `json:"turns,omitempty"`
	Constraints    map[string]string    `json:"constraints,omitempty"`
	// ConstraintOrder is the keys of Constraints, the one set longest ago
	// first: when constraints alone outgrow the budget, those go first.
	ConstraintOrder []string  `json:"constraint_order,omitempty"`
	Runs            []string  `json:"runs,omitempty"`
	Updated         time.Time `json:"updated"`

	// newest is the run being recorded (Record): Compact folds its
	// exchange only when nothing else is left to shrink.
	newest string
}

// Context is what a run is shown of s.
func (s *Session) Context() *events.SessionContext {
	return &events.SessionContext{ID: s.ID, Summary: s.Summary, SummaryTainted: s.SummaryTainted, Turns: s.Turns, Constraints: s.Constraints}
}

// Summarizer folds old turns into a summary. Implementations may call a
// model; they must return when ctx is done.
type Summarizer interface {
	Summarize(ctx context.Context, previous string, turns []events.SessionTurn) (string, error)
}

// SummarizerFunc adapts a function to Summarizer.
type SummarizerFunc func(ctx context.Context, previous string, turns []events.SessionTurn) (string, error)

// Summarize calls f.
func (f SummarizerFunc) Summarize(ctx context.Context, previous string, turns []events.SessionTurn) (string, error) {
	return f(ctx, previous, turns)
}

// Clip is the default summarizer: no model, just the first words of each
// folded turn, so the gist survives and the size is bounded.
var Clip Summarizer = SummarizerFunc(func(_ context.Context, previous string, turns []events.SessionTurn) (string, error) {
	var b strings.Builder
	b.WriteString(previous)
	for _, t := range turns {
		if b.Len() > 0 {
			b.WriteString(" | ")
		}
		text := t.Text
		if r := []rune(text); len(r) > 80 {
			text = string(r[:80]) + "…"
		}
		b.WriteString(t.Role + ": " + text)
	}
	s := b.String()
	if r := []rune(s); len(r) > 1000 {
		s = "…" + string(r[len(r)-1000:])
	}
	return s, nil
})

// Size is the bytes s takes as JSON: what its budget bounds.
func (s *Session) Size() int {
	b, _ := json.Marshal(s.Context())
	return len(b)
}

// Compact shrinks s to budget bytes: tool turns first, oldest first; then
// the oldest exchanges into the summary, but for the run being recorded
// (Record; a direct call names none); then constraints, the one set
// longest ago first; and last the recorded run's own exchange.
// Constraints are dropped, never summarized: a field is kept whole or not
// at all. Kept whatever their size, the constraints of a session whose
// runs kept adding some outgrew its budget for good, folding every new
// exchange at once, and grew until the bucket refused the entry.
func (s *Session) Compact(ctx context.Context, budget int, sum Summarizer) error {
	for s.Size() > budget {
		i := slices.IndexFunc(s.Turns, func(t events.SessionTurn) bool { return t.Role == "tool" })
		if i < 0 {
			break
		}
		s.Turns = slices.Delete(s.Turns, i, i+1)
	}
	older := func() int { // turns before the run being recorded's
		if s.newest == "" {
			return len(s.Turns)
		}
		if i := slices.IndexFunc(s.Turns, func(t events.SessionTurn) bool { return t.RunID == s.newest }); i >= 0 {
			return i
		}
		return len(s.Turns)
	}
	for s.Size() > budget && older() > 0 {
		if err := s.fold(ctx, min(2, older()), sum); err != nil { // one exchange: the question and its answer
			return err
		}
	}
	s.syncOrder()
	for s.Size() > budget && len(s.ConstraintOrder) > 0 {
		delete(s.Constraints, s.ConstraintOrder[0])
		s.ConstraintOrder = s.ConstraintOrder[1:]
	}
	for s.Size() > budget && len(s.Turns) > 0 {
		if err := s.fold(ctx, min(2, len(s.Turns)), sum); err != nil {
			return err
		}
	}
	return nil
}

// fold folds the first n turns into the summary.
func (s *Session) fold(ctx context.Context, n int, sum Summarizer) error {
	summary, err := sum.Summarize(ctx, s.Summary, s.Turns[:n])
	if err != nil {
		return fmt.Errorf("summarize session %s: %w", s.ID, err)
	}
	for _, t := range s.Turns[:n] {
		s.SummaryTainted = s.SummaryTainted || t.Tainted
	}
	s.Summary, s.Turns = summary, s.Turns[n:]
	return nil
}

// setConstraints sets each of cons, each key now the one set last.
func (s *Session) setConstraints(cons map[string]string) {
	if len(cons) == 0 {
		return
	}
	if s.Constraints == nil {
		s.Constraints = map[string]string{}
	}
	s.syncOrder()
	for _, k := range slices.Sorted(maps.Keys(cons)) {
		if _, had := s.Constraints[k]; had {
			s.ConstraintOrder = slices.DeleteFunc(s.ConstraintOrder, func(o string) bool { return o == k })
		}
		s.Constraints[k] = cons[k]
		s.ConstraintOrder = append(s.ConstraintOrder, k)
	}
}

// syncOrder makes ConstraintOrder name exactly the keys of Constraints:
// an entry stored before it existed has none (its keys, taken as the
// oldest, in key order), and one edited by hand may disagree.
func (s *Session) syncOrder() {
	s.ConstraintOrder = slices.DeleteFunc(s.ConstraintOrder, func(k string) bool { _, ok := s.Constraints[k]; return !ok })
	if len(s.ConstraintOrder) == len(s.Constraints) {
		return
	}
	var missing []string
	for k := range s.Constraints {
		if !slices.Contains(s.ConstraintOrder, k) {
			missing = append(missing, k)
		}
	}
	slices.Sort(missing)
	s.ConstraintOrder = append(missing, s.ConstraintOrder...)
}

// Store keeps sessions in the loopgate_sessions bucket.
type Store struct {
	kv jetstream.KeyValue
}

// NewStore wraps the bucket.
func NewStore(kv jetstream.KeyValue) *Store { return &Store{kv: kv} }

func key(tenant, id string) string { return tenant + "." + id }

// Get returns a session and its revision; a new session has revision 0.
func (st *Store) Get(ctx context.Context, tenant, id string) (*Session, uint64, error) {
	e, err := st.kv.Get(ctx, key(tenant, id))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return &Session{Tenant: tenant, ID: id}, 0, nil
	}
	if err != nil {
		return nil, 0, fmt.Errorf("read session %s: %w", id, err)
	}
	var s Session
	if err := json.Unmarshal(e.Value(), &s); err != nil {
		return nil, 0, fmt.Errorf("decode session %s: %w", id, err)
	}
	return &s, e.Revision(), nil
}

// recordTries bounds Record's compare-and-set attempts. Each lost one
// means another run of the session was stored meanwhile, so this many
// bounds the runs of one session that finish together, not time.
const recordTries = 200

// Record adds a finished run's exchange to its session, compacts it and
// stores it by compare-and-set, trying again after a short, random pause
// when another run of the session was stored first. A run already recorded
// is not added twice. Five tries, without a pause, lost the exchanges of
// runs of one session finishing together (9 of 12 kept, with a worker
// each).
func (st *Store) Record(ctx context.Context, tenant, id, runID string, turns []events.SessionTurn, constraints map[string]string, budget int, sum Summarizer, now time.Time) error {
	for try := range recordTries {
		s, rev, err := st.Get(ctx, tenant, id)
		if err != nil {
			return err
		}
		if slices.Contains(s.Runs, runID) {
			return nil
		}
		s.Turns = append(s.Turns, turns...)
		s.setConstraints(constraints)
		s.newest = runID
		s.Runs = append(s.Runs, runID)
		if len(s.Runs) > 100 {
			s.Runs = s.Runs[len(s.Runs)-100:]
		}
		s.Updated = now.UTC()
		if err := s.Compact(ctx, budget, sum); err != nil {
			return err
		}
		b, err := json.Marshal(s)
		if err != nil {
			return err
		}
		if rev == 0 {
			_, err = st.kv.Create(ctx, key(tenant, id), b)
		} else {
			_, err = st.kv.Update(ctx, key(tenant, id), b, rev)
		}
		if err == nil {
			return nil
		}
		// Another writer got there first: read again. (A conflict on
		// Update is ErrKeyRevisionMismatch, which a replicated bucket's
		// 10164 matches and ErrKeyExists does not.)
		if !errors.Is(err, jetstream.ErrKeyExists) && !errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
			return fmt.Errorf("store session %s: %w", id, err)
		}
		// A random pause, growing to 50 ms: writers that collided spread
		// out rather than collide again.
		pause := time.Duration(rand.Int64N(int64(min(time.Millisecond<<min(try, 6), 50*time.Millisecond)) + 1))
		if err := wait.For(ctx, pause); err != nil {
			return fmt.Errorf("store session %s: %w", id, err)
		}
	}
	return fmt.Errorf("store session %s: %d other runs of the session were stored first, one after another", id, recordTries)
}
