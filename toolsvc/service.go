package toolsvc

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/kaptinlin/jsonschema"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"github.com/loopgate/loopgate/schemas"
	"github.com/loopgate/loopgate/tools"
)

// Metadata keys a loopgate tool service advertises in $SRV.INFO.
const (
	// MetadataContract, on the service, is the version of the wire
	// contract it speaks: "1".
	MetadataContract = "loopgate.contract"
	// MetadataArgsSchema, on an endpoint, is the tool's effective argument
	// schema as canonical JSON (tools.EffectiveSchema): what `loopgate
	// tools` compares with the manifest's.
	MetadataArgsSchema = "loopgate.args_schema"
	// MetadataResultSchema, on an endpoint, is the tool's result schema as
	// canonical JSON.
	MetadataResultSchema = "loopgate.result_schema"
)

// ContractVersion is the value of MetadataContract.
const ContractVersion = "1"

// Config configures a Service.
type Config struct {
	// Name of the service in $SRV.INFO: letters, digits, '-' and '_'.
	// Required.
	Name string
	// Version of the service, semver. Defaults to "0.0.0".
	Version string
	// Description for operators. Defaults to "".
	Description string
	// QueueGroup every endpoint subscribes in: instances in one group
	// share the calls, one instance per call. micro's default, which
	// nats.js services use too, means two services on one subject never
	// both run a call. Defaults to "q".
	QueueGroup string
	// MaxConcurrent bounds the calls this instance handles at once; one
	// more is answered 503 at once (transient: loopgate retries, maybe on
	// another instance). Defaults to 64.
	MaxConcurrent int
	// DefaultTimeout bounds a call whose request carries no deadline
	// (not one from loopgate). Defaults to 30s.
	DefaultTimeout time.Duration
	// Metadata of the service in $SRV.INFO; MetadataContract is added.
	// Defaults to none.
	Metadata map[string]string
	// Logger receives one line per failed call and the full error of
	// every 500. Defaults to slog.Default().
	Logger *slog.Logger
}

// nameRegexp is micro's rule for service and endpoint names.
var nameRegexp = regexp.MustCompile(`^[A-Za-z0-9_-]+$`)

func (c Config) withDefaults() Config {
	c.Version = cmp.Or(c.Version, "0.0.0")
	c.QueueGroup = cmp.Or(c.QueueGroup, micro.DefaultQueueGroup)
	c.MaxConcurrent = cmp.Or(c.MaxConcurrent, 64)
	c.DefaultTimeout = cmp.Or(c.DefaultTimeout, 30*time.Second)
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}

func (c Config) validate() error {
	switch {
	case !nameRegexp.MatchString(c.Name):
		return fmt.Errorf("toolsvc: Config.Name %q must be letters, digits, '-' and '_'", c.Name)
	case c.MaxConcurrent < 0:
		return fmt.Errorf("toolsvc: Config.MaxConcurrent %d is negative", c.MaxConcurrent)
	case c.DefaultTimeout < 0:
		return fmt.Errorf("toolsvc: Config.DefaultTimeout %s is negative", c.DefaultTimeout)
	case strings.ContainsAny(c.QueueGroup, " \t\r\n>"):
		return fmt.Errorf("toolsvc: Config.QueueGroup %q is not a queue group name", c.QueueGroup)
	}
	return nil
}

// Service is a tool service: endpoints added with Add, served from Start
// until Stop. Its methods are safe for concurrent use.
type Service struct {
	nc  *nats.Conn
	cfg Config
	log *slog.Logger

	mu        sync.Mutex
	endpoints []*endpoint
	micro     micro.Service
	started   bool
	stopped   bool

	sem     chan struct{}  // one token per call in progress
	calls   sync.WaitGroup // calls in progress
	drained chan struct{}  // closed when the first Stop is done with micro
	halt    chan struct{}  // closed when Stop gives up waiting: cancels every call
	haltNow sync.Once
}

// endpoint is one tool.
type endpoint struct {
	name, subject string
	handler       Handler
	metadata      map[string]string
	args          *jsonschema.Schema // nil: arguments are not checked here
	argsMu        sync.Mutex         // serializes args validation (see tools.CompileArgsSchema)

	inFlight, busy, failed atomic.Int64
}

// EndpointOption configures one endpoint.
type EndpointOption func(*endpoint) error

// ArgsSchema advertises the tool's argument schema in the endpoint's
// metadata (MetadataArgsSchema, as its effective canonical form) and
// checks every request against it, answering 400 to arguments that do not
// match: loopgate validated them already, but anyone who may publish on
// the subject can call the service directly. It compiles the schema as
// loopgate's registry does (tools.CompileArgsSchema: formats asserted, a
// $ref that does not resolve refused), so the two refuse the same
// arguments.
func ArgsSchema(schema json.RawMessage) EndpointOption {
	return func(e *endpoint) error {
		eff, err := tools.EffectiveSchema(schema)
		if err != nil {
			return err
		}
		s, err := tools.CompileArgsSchema(eff)
		if err != nil {
			return fmt.Errorf("args_schema: %w", err)
		}
		e.args = s
		e.metadata[MetadataArgsSchema] = string(eff)
		return nil
	}
}

// ResultSchema advertises the tool's result schema in the endpoint's
// metadata (MetadataResultSchema, canonical JSON). loopgate checks results
// against the manifest's result_schema, not this one.
func ResultSchema(schema json.RawMessage) EndpointOption {
	return func(e *endpoint) error {
		c, err := tools.Canonical(schema)
		if err != nil {
			return fmt.Errorf("result_schema: %w", err)
		}
		e.metadata[MetadataResultSchema] = string(c)
		return nil
	}
}

// Metadata adds a key to the endpoint's metadata in $SRV.INFO.
func Metadata(key, value string) EndpointOption {
	return func(e *endpoint) error {
		e.metadata[key] = value
		return nil
	}
}

// New returns a service that will serve on nc. Nothing is subscribed until
// Start. It fails on a bad Config, naming the field.
func New(nc *nats.Conn, cfg *Config) (*Service, error) {
	if nc == nil {
		return nil, errors.New("toolsvc: nil *nats.Conn")
	}
	if cfg == nil {
		cfg = &Config{}
	}
	c := cfg.withDefaults()
	if err := c.validate(); err != nil {
		return nil, err
	}
	c.Metadata = maps.Clone(c.Metadata)
	return &Service{
		nc:      nc,
		cfg:     c,
		log:     c.Logger.With("service", c.Name),
		sem:     make(chan struct{}, c.MaxConcurrent),
		halt:    make(chan struct{}),
		drained: make(chan struct{}),
	}, nil
}

// Add registers the tool name, answered on subject by h. name is the
// endpoint's name in $SRV.INFO (letters, digits, '-' and '_': every
// loopgate tool name qualifies); subject is the manifest's executor
// subject. Add must be called before Start.
func (s *Service) Add(name, subject string, h Handler, opts ...EndpointOption) error {
	switch {
	case !nameRegexp.MatchString(name):
		return fmt.Errorf("toolsvc: add %q: name must be letters, digits, '-' and '_'", name)
	case subject == "" || strings.ContainsAny(subject, " \t\r\n"):
		return fmt.Errorf("toolsvc: add %q: subject %q is not a subject", name, subject)
	case h == nil:
		return fmt.Errorf("toolsvc: add %q: nil handler", name)
	}
	e := &endpoint{name: name, subject: subject, handler: h, metadata: map[string]string{}}
	for _, opt := range opts {
		if err := opt(e); err != nil {
			return fmt.Errorf("toolsvc: add %q: %w", name, err)
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.started {
		return fmt.Errorf("toolsvc: add %q: the service has started", name)
	}
	for _, o := range s.endpoints {
		if o.name == name || o.subject == subject {
			return fmt.Errorf("toolsvc: add %q: name or subject %q already added", name, subject)
		}
	}
	s.endpoints = append(s.endpoints, e)
	return nil
}

// Start registers the micro service and subscribes every endpoint, and
// returns once the server has the subscriptions: from then on the service
// answers calls and $SRV discovery. ctx bounds that wait (at most 10s)
// and is not retained. After an error, call Stop. A service once stopped
// does not start: Stop may come first (a shutdown during startup), and
// then no later Stop would unsubscribe what Start subscribed.
func (s *Service) Start(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.stopped:
		return fmt.Errorf("toolsvc: start %s: the service was stopped", s.cfg.Name)
	case s.started:
		return errors.New("toolsvc: already started")
	}
	md := maps.Clone(s.cfg.Metadata)
	if md == nil {
		md = map[string]string{}
	}
	md[MetadataContract] = ContractVersion
	svc, err := micro.AddService(s.nc, micro.Config{
		Name:         s.cfg.Name,
		Version:      s.cfg.Version,
		Description:  s.cfg.Description,
		Metadata:     md,
		QueueGroup:   s.cfg.QueueGroup,
		StatsHandler: s.stats,
	})
	if err != nil {
		return fmt.Errorf("toolsvc: start %s: %w", s.cfg.Name, err)
	}
	for _, e := range s.endpoints {
		h := micro.HandlerFunc(func(r micro.Request) { s.dispatch(e, r) })
		if err := svc.AddEndpoint(e.name, h, micro.WithEndpointSubject(e.subject), micro.WithEndpointMetadata(e.metadata)); err != nil {
			return errors.Join(fmt.Errorf("toolsvc: start %s: endpoint %s: %w", s.cfg.Name, e.name, err), svc.Stop())
		}
	}
	s.micro, s.started = svc, true
	// Once the server has the subscriptions, a call finds them.
	fctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := s.nc.FlushWithContext(fctx); err != nil {
		return fmt.Errorf("toolsvc: start %s: flush: %w", s.cfg.Name, err)
	}
	return nil
}

// Stop stops taking calls and waits for the calls in progress to return.
// The endpoints' subscriptions are drained: a call the server had already
// delivered, or that still arrives, is answered 503 "stopping" (transient:
// loopgate retries it, maybe on another instance), and Stop waits until
// the subscriptions have handed on every such call, so closing the
// connection once Stop returns leaves none unanswered. On a connection
// shared with other subscriptions, that wait is also one for their
// callbacks to get through what they had queued, for at most 10s. If ctx
// ends first, Stop cancels the calls' contexts and returns ctx's error
// without waiting further: a call cut short gets no reply, so loopgate
// sees a timeout (an unknown outcome for a write). Stop is idempotent,
// and a second Stop waits as the first does; the connection stays open.
func (s *Service) Stop(ctx context.Context) error {
	s.mu.Lock()
	first := !s.stopped
	s.stopped = true
	svc := s.micro
	s.mu.Unlock()
	var err error
	if first {
		if svc != nil {
			if err = svc.Stop(); err == nil {
				err = s.awaitDrain(ctx)
			}
		}
		close(s.drained)
	}
	select {
	case <-s.drained:
	case <-ctx.Done():
	}
	done := make(chan struct{})
	go func() {
		s.calls.Wait()
		close(done)
	}()
	select {
	case <-done:
		return err
	case <-ctx.Done():
		s.haltNow.Do(func() { close(s.halt) })
		return errors.Join(err, fmt.Errorf("toolsvc: stop %s: calls still running were cancelled: %w", s.cfg.Name, ctx.Err()))
	}
}

// maxDrainWait bounds awaitDrain's wait whatever Stop's ctx: a
// subscription callback on the connection that does not return (one that
// called Stop, with a ctx that never ends) must not hold Stop forever.
const maxDrainWait = 10 * time.Second

// awaitDrain waits, until ctx ends (at most maxDrainWait), for the
// endpoints' subscriptions, which micro's Stop drains, to hand every call
// the server delivered to them to dispatch, which answers it 503 now that
// the service is stopped. micro's Stop does not wait for that, and a call
// still queued in a subscription when the connection closes goes
// unanswered: a timeout to loopgate (outcome unknown, a write sent to
// reconciliation) for a call that never ran. micro does not expose the
// subscriptions, so it waits on the connection. The end of ctx is not an
// error here: Stop reports it.
func (s *Service) awaitDrain(ctx context.Context) error {
	wctx, cancel := context.WithTimeout(ctx, maxDrainWait)
	defer cancel()
	if s.nc.IsConnected() {
		// The flush's PONG comes after every message the server sent
		// before it took the drain's UNSUBs: once it is back, they are
		// all queued in the subscriptions. (While disconnected nothing
		// more comes, and what came is queued.)
		err := s.nc.FlushWithContext(wctx)
		switch {
		case err == nil:
		case errors.Is(err, nats.ErrConnectionClosed):
			return nil // the queued calls went with the connection
		case ctx.Err() != nil:
			return nil // Stop reports it
		default:
			return fmt.Errorf("toolsvc: stop %s: calls delivered before the drain may go unanswered: flush: %w", s.cfg.Name, err)
		}
	}
	// A barrier runs once every callback subscription on the connection,
	// ours among them, has handled all it had queued before it. (Another
	// subscription's slow callback holds it up too: hence the bound.)
	barrier := make(chan struct{})
	if err := s.nc.Barrier(func() { close(barrier) }); err != nil {
		return nil // closed: the queued calls went with the connection
	}
	select {
	case <-barrier:
		return nil
	case <-wctx.Done():
		if ctx.Err() != nil {
			return nil
		}
		return fmt.Errorf("toolsvc: stop %s: calls delivered before the drain may go unanswered: subscriptions still busy after %s", s.cfg.Name, maxDrainWait)
	}
}

// Info is the service's $SRV.INFO answer; the zero Info before Start.
func (s *Service) Info() micro.Info {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.micro == nil {
		return micro.Info{}
	}
	return s.micro.Info()
}

// dispatch runs on the endpoint subscription's goroutine: it hands the
// call to a goroutine of its own, so one slow call does not hold up the
// others, or answers 503 when the service is full or stopping.
//
// The goroutine replies by publishing on the request's reply subject, not
// through r: a micro.Request is only safe to use until its handler returns.
func (s *Service) dispatch(e *endpoint, r micro.Request) {
	received := time.Now()
	if r.Reply() == "" {
		s.log.Warn("message without a reply subject ignored: a call is a request", "endpoint", e.name)
		return
	}
	msg := &nats.Msg{Subject: r.Subject(), Reply: r.Reply(), Header: nats.Header(r.Headers()), Data: r.Data()}
	select {
	case s.sem <- struct{}{}:
	default:
		e.busy.Add(1)
		s.reject(e, r, "busy: "+strconv.Itoa(s.cfg.MaxConcurrent)+" calls in progress")
		return
	}
	s.mu.Lock()
	if s.stopped {
		s.mu.Unlock()
		<-s.sem
		s.reject(e, r, "stopping")
		return
	}
	s.calls.Add(1)
	s.mu.Unlock()
	e.inFlight.Add(1)
	go func() {
		defer func() {
			e.inFlight.Add(-1)
			<-s.sem
			s.calls.Done()
		}()
		s.serve(e, msg, received)
	}()
}

// reject answers 503 to a call that was not run.
func (s *Service) reject(e *endpoint, r micro.Request, why string) {
	if err := r.Error(strconv.Itoa(http.StatusServiceUnavailable), why, nil); err != nil {
		s.log.Warn("reply", "endpoint", e.name, "err", err)
	}
}

// serve runs one call and replies to msg.
func (s *Service) serve(e *endpoint, msg *nats.Msg, received time.Time) {
	req := newRequest(msg, received, s.cfg.DefaultTimeout)
	ctx, cancel := context.WithDeadline(context.Background(), req.Deadline)
	defer cancel()
	go func() {
		select {
		case <-s.halt:
			cancel()
		case <-ctx.Done():
		}
	}()
	log := s.log.With("tool", e.name, "run_id", req.RunID, "call_id", req.CallID, "operation_id", req.OperationID)
	if ctx.Err() != nil {
		// Its deadline passed before it came (held back by a reconnect, a
		// slow link, a clock ahead): loopgate stopped waiting for it, and
		// may have found the write not applied and run it again. A call
		// nobody waits for is not run.
		e.failed.Add(1)
		log.Warn("call came after its deadline: not run, no reply sent", "deadline", req.Deadline)
		return
	}

	v, err := s.run(ctx, e, req)
	if err == nil && ctx.Err() != nil {
		// Done, but after its deadline: loopgate stopped waiting, and finds
		// out whether it took effect (a timeout; a write is reconciled).
		// No reply claims it, as for a call that ended with an error.
		log.Warn("call ended after its deadline: no reply sent", "ctx", ctx.Err())
		return
	}
	if err == nil {
		var body []byte
		if body, err = marshalResult(v); err == nil {
			if err = s.nc.Publish(msg.Reply, body); err == nil {
				return
			}
			log.Error("reply", "err", err)
			err = fmt.Errorf("result: %w", err)
		}
	}
	e.failed.Add(1)
	if ctx.Err() != nil {
		// The call's deadline has passed (loopgate stopped waiting at the
		// same instant, give or take the header's millisecond) or Stop
		// cancelled it. Whether it took effect is for loopgate to find out
		// (a timeout; a write is reconciled), not for a reply racing its
		// deadline to claim.
		log.Warn("call ended with its context: no reply sent", "err", err, "ctx", ctx.Err())
		return
	}
	code, desc := replyError(err)
	switch {
	case code >= 500 && code != http.StatusServiceUnavailable:
		log.Error("call failed", "code", code, "err", err)
	default:
		log.Info("call refused", "code", code, "err", err)
	}
	h := nats.Header{}
	h.Set(micro.ErrorCodeHeader, strconv.Itoa(code))
	h.Set(micro.ErrorHeader, headerValue(cmp.Or(desc, http.StatusText(code), "error")))
	if rerr := s.nc.PublishMsg(&nats.Msg{Subject: msg.Reply, Header: h}); rerr != nil {
		log.Warn("reply", "err", rerr)
	}
}

// run checks the arguments and calls the handler, turning a panic into an
// error.
func (s *Service) run(ctx context.Context, e *endpoint, req Request) (v any, err error) {
	if e.args != nil {
		e.argsMu.Lock()
		res := e.args.ValidateJSON(req.Args)
		e.argsMu.Unlock()
		if !res.IsValid() {
			var msgs []string
			for _, fe := range schemas.Errors(res) {
				msgs = append(msgs, cmp.Or(fe.Field, "/")+": "+fe.Message)
			}
			return nil, BadRequest(fmt.Errorf("arguments do not match the schema: %s", strings.Join(msgs, "; ")))
		}
	}
	defer func() {
		if p := recover(); p != nil {
			v, err = nil, fmt.Errorf("handler panicked: %v", p)
		}
	}()
	return e.handler(ctx, req)
}

// marshalResult encodes a result as a reply's body. A result's
// MarshalJSON is the handler's code as much as the handler is: its panic
// is recovered into an error (a 500) as the handler's is in run, not left
// to kill the process.
func marshalResult(v any) (body []byte, err error) {
	defer func() {
		if p := recover(); p != nil {
			body, err = nil, fmt.Errorf("result: encoding panicked: %v", p)
		}
	}()
	body, err = json.Marshal(struct {
		Result any `json:"result"`
	}{v})
	if err != nil {
		return nil, fmt.Errorf("result: %w", err)
	}
	return body, nil
}

// stats is the micro STATS data of an endpoint: micro counts requests, but
// handlers run on goroutines of their own, so its processing time and
// error counts miss them; these counters do not.
//
// It runs under micro's lock, so it takes none of ours: s.endpoints no
// longer changes once Start has run.
func (s *Service) stats(me *micro.Endpoint) any {
	for _, e := range s.endpoints {
		if e.name == me.Name {
			return map[string]int64{"in_flight": e.inFlight.Load(), "busy": e.busy.Load(), "failed": e.failed.Load()}
		}
	}
	return nil
}

// maxDescription bounds an error reply's description.
const maxDescription = 512

// headerValue makes s safe as a header value: one line, at most
// maxDescription bytes.
func headerValue(s string) string {
	s = strings.Join(strings.FieldsFunc(strings.ToValidUTF8(s, "?"), func(r rune) bool {
		return r == '\r' || r == '\n' || r < 0x20 || r == 0x7f
	}), " ")
	if len(s) > maxDescription {
		cut := maxDescription
		for cut > 0 && !utf8.RuneStart(s[cut]) {
			cut--
		}
		s = s[:cut]
	}
	return s
}
