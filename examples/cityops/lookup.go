package cityops

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/loopgate/loopgate/tools"
)

// errInvalidArgs marks arguments a tool refuses. loopgate validates every
// call against the tool's schema first, so seeing it means the schema and
// the tool disagree: a bug, which loopgate treats as unexpected.
var errInvalidArgs = errors.New("invalid arguments")

// lookupArgs are lookup_complaints' and slow_lookup's arguments, with their
// defaults already in place before decoding.
type lookupArgs struct {
	Category      string `json:"category"`
	Status        string `json:"status"`
	OlderThanDays int    `json:"older_than_days"`
	Limit         int    `json:"limit"`
}

// Bounds of lookupArgs, mirrored by schemas/lookup_complaints.schema.json.
const (
	maxOlderThanDays = 365
	maxLookupLimit   = 20
)

func parseLookupArgs(call tools.Call) (lookupArgs, error) {
	a := lookupArgs{Category: "sanitation", Status: StatusOpen, Limit: 5}
	if err := decodeStrict(call.Args, &a); err != nil {
		return a, fmt.Errorf("%s: %w: %w", call.Tool, errInvalidArgs, err)
	}
	var problems []string
	if !slices.Contains(categories, a.Category) {
		problems = append(problems, fmt.Sprintf("category %q is not one of %s", a.Category, strings.Join(categories, ", ")))
	}
	if !slices.Contains(statuses, a.Status) {
		problems = append(problems, fmt.Sprintf("status %q is not one of %s", a.Status, strings.Join(statuses, ", ")))
	}
	if a.OlderThanDays < 0 || a.OlderThanDays > maxOlderThanDays {
		problems = append(problems, fmt.Sprintf("older_than_days %d is outside 0..%d", a.OlderThanDays, maxOlderThanDays))
	}
	if a.Limit < 1 || a.Limit > maxLookupLimit {
		problems = append(problems, fmt.Sprintf("limit %d is outside 1..%d", a.Limit, maxLookupLimit))
	}
	if len(problems) > 0 {
		return a, fmt.Errorf("%s: %w: %s", call.Tool, errInvalidArgs, strings.Join(problems, "; "))
	}
	return a, nil
}

// lookup returns the complaints of a's category and status open for more
// than a.OlderThanDays days, oldest first (ties by request id), at most
// a.Limit of them. It never returns nil, so an empty answer is [] not null.
func (d *data) lookup(tenant string, a lookupArgs) []Complaint {
	rows := []Complaint{}
	for _, c := range d.complaints {
		// A tenant sees only its own complaints, whatever the model asks.
		if c.Tenant == cmp.Or(tenant, DefaultTenant) && c.Category == a.Category && c.Status == a.Status && c.DaysOpen > a.OlderThanDays {
			rows = append(rows, c)
		}
	}
	slices.SortFunc(rows, func(x, y Complaint) int {
		return cmp.Or(cmp.Compare(y.DaysOpen, x.DaysOpen), cmp.Compare(x.RequestID, y.RequestID))
	})
	if len(rows) > a.Limit {
		rows = rows[:a.Limit]
	}
	return rows
}

// lookupComplaints is the lookup_complaints tool. Its result is the full
// rows; the manifest's view decides what the model sees of them.
func (ts *toolset) lookupComplaints(_ context.Context, call tools.Call) (any, error) {
	a, err := parseLookupArgs(call)
	if err != nil {
		return nil, err
	}
	return ts.data.lookup(call.Tenant, a), nil
}

// slowLookup is the slow_lookup tool: lookup_complaints behind a vendor
// endpoint that hangs for Options.SlowDelay. It gives up as soon as ctx is
// done, returning ctx.Err(), which is how loopgate's per-call deadline
// reaches it.
func (ts *toolset) slowLookup(ctx context.Context, call tools.Call) (any, error) {
	a, err := parseLookupArgs(call)
	if err != nil {
		return nil, err
	}
	t := time.NewTimer(ts.opts.SlowDelay)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-t.C:
	}
	return ts.data.lookup(call.Tenant, a), nil
}
