package cityops

import (
	"cmp"
	"embed"
	"errors"
	"fmt"
	"hash/fnv"
	"io/fs"
	"strings"
	"sync"
	"time"

	"github.com/loopgate/loopgate/tools"
)

// Files holds the example's configuration, ready to load without the source
// tree: loopgate.yaml at the root, the tools' argument schemas under
// schemas/, the scripted model's decision files under scripts/ and the
// example approvers' key seeds under keys/ (see [ApproverKeyFile]). Paths
// in loopgate.yaml are relative to its root.
//
//go:embed loopgate.yaml schemas/*.json scripts/*.json keys/*.nk keys/demo-seal.key
var Files embed.FS

// ConfigFile is the name of the example's configuration in [Files].
const ConfigFile = "loopgate.yaml"

// ApproverKeyFile is the path, in [Files] and in the example's directory,
// of the nkey seed of approver id (supervisor@cityops, intern@cityops,
// dev@cityops): keys/<id>.nk. loopgate.yaml has the matching public keys
// and requires signed approvals, so the demo and the tests sign with these.
//
// They are EXAMPLE keys, committed with the source: anyone can sign as these
// approvers. Never trust them in a real policy.
func ApproverKeyFile(id string) string { return "keys/" + id + ".nk" }

// ApproverSeed returns the contents of approver id's example seed file
// (an "SU…" nkey seed on a line of its own), or an error wrapping
// fs.ErrNotExist when the example has no key for id.
func ApproverSeed(id string) ([]byte, error) {
	if !fs.ValidPath(ApproverKeyFile(id)) || strings.ContainsAny(id, "/\\") {
		return nil, fmt.Errorf("cityops: no example key for approver %q: %w", id, fs.ErrNotExist)
	}
	b, err := Files.ReadFile(ApproverKeyFile(id))
	if err != nil {
		return nil, fmt.Errorf("cityops: no example key for approver %q: %w", id, err)
	}
	return b, nil
}

// Tool names, as the manifests in loopgate.yaml and the scripts use them.
const (
	ToolLookupComplaints = "lookup_complaints"
	ToolGetProcedure     = "get_procedure"
	ToolDraftEscalation  = "draft_escalation"
	ToolSlowLookup       = "slow_lookup"
)

// Options configure the example's tools.
type Options struct {
	// Outbox is the directory draft_escalation writes drafts to; it is
	// created on the first draft. Required.
	Outbox string
	// SlowDelay is how long slow_lookup hangs before it answers, unless its
	// context ends first. Defaults to 30s.
	SlowDelay time.Duration
}

func (o Options) withDefaults() Options {
	o.SlowDelay = cmp.Or(o.SlowDelay, 30*time.Second)
	return o
}

func (o Options) validate() error {
	if o.Outbox == "" {
		return errors.New("cityops: Options.Outbox is required")
	}
	if o.SlowDelay < 0 {
		return fmt.Errorf("cityops: Options.SlowDelay %s is negative", o.SlowDelay)
	}
	return nil
}

// Register adds the example's four tools to b: lookup_complaints,
// get_procedure, draft_escalation and slow_lookup. It adds all of them or,
// on error, none. The tools are safe for concurrent use.
func Register(b tools.Builtins, opts Options) error {
	if b == nil {
		return errors.New("cityops: register: nil Builtins")
	}
	opts = opts.withDefaults()
	if err := opts.validate(); err != nil {
		return err
	}
	d, err := loadData()
	if err != nil {
		return err
	}
	sweepTemps(opts.Outbox, time.Now().Add(-staleTemp))
	ts := &toolset{opts: opts, data: d}
	fns := map[string]tools.Func{
		ToolLookupComplaints:   ts.lookupComplaints,
		ToolGetProcedure:       ts.getProcedure,
		ToolDraftEscalation:    ts.draftEscalation,
		ToolSlowLookup:         ts.slowLookup,
		ToolDraftStatus:        ts.draftStatus,
		ResolverComplaintOwner: ts.complaintOwner,
	}
	for name := range fns {
		if _, taken := b[name]; taken {
			return fmt.Errorf("cityops: register builtin %q: already registered", name)
		}
	}
	for name, fn := range fns {
		if err := b.Register(name, fn); err != nil {
			return fmt.Errorf("cityops: %w", err)
		}
	}
	return nil
}

// toolset is the state the tools share: the options, the read-only data and
// the locks that make a draft's check-then-write one step.
type toolset struct {
	opts Options
	data *data

	// draftLocks serialize the drafts of one operation (same file name);
	// drafts of different operations take different locks (mostly), so one
	// draft's fsync does not hold up the others. A single lock made every
	// draft of a process wait for the one before it: at a few hundred
	// drafts per second the disk's fsync latency, not loopgate, set the pace
	// (docs/benchmarks.md).
	draftLocks [64]sync.Mutex
}

// draftLock is the lock of the draft file name.
func (ts *toolset) draftLock(name string) *sync.Mutex {
	h := fnv.New32a()
	h.Write([]byte(name))
	return &ts.draftLocks[h.Sum32()%uint32(len(ts.draftLocks))]
}
