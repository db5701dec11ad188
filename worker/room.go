package worker

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/loopgate/loopgate/events"
	"github.com/loopgate/loopgate/journal"
)

// An approval message that decides nothing is recorded in its run's trail
// (approval_rejected) by whichever worker handles it, even while another
// worker drives the run: a second approver, a double click, a stale or
// forged message, arriving as the approved write runs. That append takes
// the run's next seq, and the driving worker's next append loses the race.
// Reloading then threw away what the worker held: a tool's result (the
// run waited out the attempt's lease and settled it from its idempotency
// record, or asked a human about a write that had plainly failed), or a
// decision of the model not yet stored (asked again). Such a record changes
// nothing the worker decided on (events.RunState.Apply folds it into no
// field but the count), so the worker makes room for it instead: its
// events move up and are appended again. A worker that lost the run to
// its driver records the model call it paid for in vain the same way
// (discarded, events.Type.IsRecord); the driver making room for it adds
// its usage to the run's totals.

// maxMadeRoom bounds how often one append makes room before the conflict
// goes to drive, which reloads: a run flooded with junk approval messages
// still gets written, by the reload's path.
const maxMadeRoom = 8

// store appends evs, the run's next events in order, conditional on r.last,
// in one Append or (atomic) one atomic batch, through storePatiently. When
// it loses the race to approval records only, it makes room (makeRoom) and
// appends what is left again; evs' seqs are then renumbered in place.
func (r *run) store(ctx context.Context, evs []events.Event, atomic bool) (_ uint64, err error) {
	began := time.Now()
	defer func() {
		if err == nil {
			r.stored(evs, time.Since(began))
		}
	}()
	pending := evs
	for made := 0; ; made++ {
		var last uint64
		err := r.storePatiently(ctx, func() (err error) {
			if !atomic {
				last, err = r.p.journal.Append(ctx, r.last, pending...)
				return err
			}
			last, err = r.p.journal.AppendBatch(ctx, r.last, pending...)
			if errors.Is(err, journal.ErrBatchRefused) {
				// Nothing was stored: the stream had too many batches open
				// (50 by default; a pool busier than that meets the limit)
				// or lost one. Store the events one by one: every prefix
				// of a step's events is a state the run resumes from, as
				// without batching.
				r.p.warnBatchRefused(ctx, err)
				last, err = r.p.journal.Append(ctx, r.last, pending...)
			}
			return err
		})
		if made == maxMadeRoom || !errors.Is(err, journal.ErrConflict) {
			return last, err
		}
		rest, ok, rerr := r.makeRoom(ctx, pending)
		switch {
		case rerr != nil:
			return 0, fmt.Errorf("%w (then reading the run: %w)", err, rerr)
		case !ok:
			return 0, err
		case len(rest) == 0:
			return r.last, nil
		}
		pending = rest
	}
}

// makeRoom reads the run after a lost append of pending and, if the events
// another writer stored since r's last are approval records
// (approval_rejected) and nothing else, takes them in: r.last and the
// state's seq move past them, and the events of pending not yet stored
// (rest; a one-by-one Append may have stored a prefix before the record
// came) are renumbered to follow them. ok is false when anything else came
// in between, or pending holds an approval handler's own records, which
// decide from what the trail says: then the run must be reloaded.
func (r *run) makeRoom(ctx context.Context, pending []events.Event) (rest []events.Event, ok bool, err error) {
	for _, e := range pending {
		if e.Type == events.TypeApproved || e.Type == events.TypeApprovalRejected {
			return nil, false, nil
		}
	}
	loaded, last, err := r.p.journal.Load(ctx, r.task.Tenant, r.st.RunID)
	if err != nil {
		return nil, false, err
	}
	base := pending[0].Seq - 1
	if uint64(len(loaded)) <= base || (base > 0 && loaded[base-1].Seq != base) {
		return nil, false, nil
	}
	after := loaded[base:]
	stored := 0
	for stored < len(after) && stored < len(pending) && after[stored].EventID == pending[stored].EventID {
		stored++
	}
	records := after[stored:]
	if len(records) == 0 {
		return nil, false, nil
	}
	var charges []events.DiscardedData
	for _, e := range records {
		if !e.Type.IsRecord() {
			return nil, false, nil
		}
		if e.Type == events.TypeDiscarded {
			var d events.DiscardedData
			if err := e.Decode(&d); err != nil {
				return nil, false, nil
			}
			charges = append(charges, d)
		}
	}
	rest = pending[stored:]
	next := records[len(records)-1].Seq + 1
	for i := range rest {
		rest[i].Seq = next + uint64(i)
		if rest[i].Type == events.TypeFinished && !r.countRecords(&rest[i], len(records), charges) {
			return nil, false, nil
		}
	}
	// pending's events are in the state already (staged) or go in after
	// this (append): either way the state's count moves by the records.
	r.st.LastSeq += uint64(len(records))
	for _, d := range charges {
		r.st.Charge(d) // the budgets count what another pass at the run paid for
	}
	r.last = last
	r.log.DebugContext(ctx, "records appended meanwhile (answers that decided nothing, model calls another pass lost); appending after them", "records", len(records), "last_seq", next-1)
	return rest, true, nil
}

// countRecords adds the records a finished event now follows to the totals
// it was staged with: n more events, and the model calls charged. It
// reports false if the event cannot be rewritten (then the run reloads).
func (r *run) countRecords(e *events.Event, n int, charges []events.DiscardedData) bool {
	var d events.FinishedData
	if err := e.Decode(&d); err != nil {
		return false
	}
	d.Totals.Events += n
	for _, c := range charges {
		d.Totals.Usage.Add(c.Usage)
		d.Totals.CostUSD += c.CostUSD
	}
	raw, err := events.EncodeData(d)
	if err != nil {
		return false
	}
	e.Data = raw
	return true
}
