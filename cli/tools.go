package cli

import (
	"cmp"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"github.com/loopgate/loopgate/internal/natsconn"
	"github.com/loopgate/loopgate/tools"
	"github.com/loopgate/loopgate/toolsvc"
)

// runTools is `loopgate tools`: the config's tool manifests and, with
// --nats, the tool services discovered on that NATS ($SRV.INFO) and every
// mismatch between the two. Exit 0 when there is nothing to flag, 1 when
// something is (or on an error).
func runTools(ctx context.Context, e env, args []string) int {
	fs := flag.NewFlagSet("loopgate tools", flag.ContinueOnError)
	configPath := fs.String("config", "", "config file (default: the built-in CityOps example)")
	natsURL := fs.String("nats", "", "NATS URL to discover tool services on (default: list the manifests only)")
	wait := fs.Duration("wait", time.Second, "how long to collect $SRV.INFO answers")
	if code, ok := parseOnlyFlags(fs, e, args); !ok {
		return code
	}
	cfg, err := loadConfig(*configPath)
	if err != nil {
		return fail(e, "%v", err)
	}
	where := cmp.Or(*configPath, "the built-in CityOps example")
	printManifests(e.stdout, where, cfg.Tools)
	if *natsURL == "" {
		return exitOK
	}

	// Authenticated like the other client commands (authFromEnv): a
	// server with accounts refuses an anonymous client.
	opts, err := authFromEnv().options(true)
	if err != nil {
		return fail(e, "%v", err)
	}
	nc, err := nats.Connect(*natsURL, append(opts, nats.Name("loopgate-tools"), nats.Timeout(5*time.Second))...)
	if err != nil {
		return fail(e, "connect to %s: %v", natsconn.RedactedURLs(*natsURL), err)
	}
	defer nc.Close()
	infos, err := discover(ctx, nc, *wait)
	if err != nil {
		return fail(e, "discover tool services on %s: %v", *natsURL, err)
	}
	printServices(e.stdout, nc.ConnectedUrlRedacted(), infos)
	problems := toolProblems(cfg.Tools, infos)
	if len(problems) == 0 {
		fmt.Fprintln(e.stdout, "\nno mismatches: every nats tool has a responder, and every advertised schema matches its manifest")
		return exitOK
	}
	fmt.Fprintf(e.stdout, "\nmismatches (%d):\n", len(problems))
	for _, p := range problems {
		fmt.Fprintln(e.stdout, "  "+p)
	}
	return exitError
}

func printManifests(w io.Writer, where string, ms []tools.Manifest) {
	fmt.Fprintf(w, "tools in %s (%d):\n", where, len(ms))
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "  NAME\tPERMISSION\tEXECUTOR\tTIMEOUT")
	for _, m := range ms {
		ex := m.Executor.String()
		if m.Executor.Kind() == tools.ExecutorBuiltin {
			ex += ":" + cmp.Or(m.Builtin, m.Name)
		}
		timeout := "10s"
		if m.Timeout > 0 {
			timeout = m.Timeout.D().String()
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\n", m.Name, m.Permission, ex, timeout)
	}
	tw.Flush()
}

// discover asks every micro service on nc for its info and collects the
// answers for up to wait, or until 250ms pass without a new one after the
// first. Instances are sorted by service name, version and id. A server
// that refuses this user the request or its reply inbox answers nothing,
// which would read as "no services": that is an error naming the refusal.
func discover(ctx context.Context, nc *nats.Conn, wait time.Duration) ([]micro.Info, error) {
	subject, err := micro.ControlSubject(micro.InfoVerb, "", "")
	if err != nil {
		return nil, err
	}
	inbox := nc.NewRespInbox()
	replies := make(chan *nats.Msg, 256)
	sub, err := nc.ChanSubscribe(inbox, replies)
	if err != nil {
		return nil, err
	}
	defer sub.Unsubscribe()
	if err := nc.PublishRequest(subject, inbox, nil); err != nil {
		return nil, err
	}
	// The server reports a refused subscription or publish before it
	// answers the flush's ping.
	if err := nc.FlushTimeout(5 * time.Second); err != nil {
		return nil, err
	}
	if refused := refusal(nc, fmt.Errorf("asking %s for the services there", subject)); refused != nil {
		return nil, refused
	}
	overall := time.NewTimer(wait)
	defer overall.Stop()
	idle := time.NewTimer(wait)
	defer idle.Stop()
	var infos []micro.Info
	for {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-overall.C:
			return sortInfos(infos), nil
		case <-idle.C:
			return sortInfos(infos), nil
		case m := <-replies:
			var info micro.Info
			if json.Unmarshal(m.Data, &info) == nil && info.Name != "" {
				infos = append(infos, info)
			}
			idle.Reset(250 * time.Millisecond)
		}
	}
}

func sortInfos(infos []micro.Info) []micro.Info {
	slices.SortFunc(infos, func(a, b micro.Info) int {
		return cmp.Or(cmp.Compare(a.Name, b.Name), cmp.Compare(a.Version, b.Version), cmp.Compare(a.ID, b.ID))
	})
	return infos
}

// printServices lists the services found, one block per name and version
// with its instance count, and their endpoints.
func printServices(w io.Writer, url string, infos []micro.Info) {
	type key struct{ name, version string }
	var order []key
	groups := map[key][]micro.Info{}
	for _, in := range infos {
		k := key{in.Name, in.Version}
		if _, ok := groups[k]; !ok {
			order = append(order, k)
		}
		groups[k] = append(groups[k], in)
	}
	fmt.Fprintf(w, "\nservices on %s (%s, %s):\n", url, plural(len(order), "service"), plural(len(infos), "instance"))
	if len(infos) == 0 {
		fmt.Fprintln(w, "  none answered $SRV.INFO")
		return
	}
	for _, k := range order {
		in := groups[k][0]
		kind := "micro service"
		if in.Metadata[toolsvc.MetadataContract] != "" {
			kind = "loopgate tool service (contract " + in.Metadata[toolsvc.MetadataContract] + ")"
		}
		fmt.Fprintf(w, "  %s %s: %s, %s", k.name, k.version, plural(len(groups[k]), "instance"), kind)
		if in.Description != "" {
			fmt.Fprintf(w, ": %s", in.Description)
		}
		fmt.Fprintln(w)
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		seen := map[string]bool{}
		for _, g := range groups[k] {
			for _, ep := range g.Endpoints {
				if seen[ep.Name+" "+ep.Subject] {
					continue
				}
				seen[ep.Name+" "+ep.Subject] = true
				schema := "no args schema advertised"
				if ep.Metadata[toolsvc.MetadataArgsSchema] != "" {
					schema = "args schema advertised"
				}
				fmt.Fprintf(tw, "    %s\t%s\tqueue %s\t%s\n", ep.Name, ep.Subject, cmp.Or(ep.QueueGroup, "(none)"), schema)
			}
		}
		tw.Flush()
	}
}

func plural(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return fmt.Sprintf("%d %ss", n, what)
}

// toolProblems compares the manifests of nats tools with the endpoints
// discovered: a subject no endpoint serves, and an endpoint whose
// advertised argument (or result) schema is not the manifest's. Schemas
// are compared in effective canonical form (tools.EffectiveSchema), so
// formatting, key order and an implicit additionalProperties:false do
// not count.
func toolProblems(ms []tools.Manifest, infos []micro.Info) []string {
	var problems []string
	for _, m := range ms {
		if m.Executor.Kind() != tools.ExecutorNATS {
			continue
		}
		subject := m.Executor.NATS
		want, err := tools.EffectiveSchema(m.ArgsSchema)
		if err != nil {
			problems = append(problems, fmt.Sprintf("%s: the manifest's %v", m.Name, err))
			continue
		}
		served, seen := false, map[string]bool{}
		for _, in := range infos {
			for _, ep := range in.Endpoints {
				if !subjectMatches(ep.Subject, subject) {
					continue
				}
				served = true
				who := fmt.Sprintf("%s %s endpoint %s (%s)", in.Name, in.Version, ep.Name, ep.Subject)
				for _, p := range endpointProblems(m, want, ep.Metadata) {
					if msg := fmt.Sprintf("%s: %s %s", m.Name, who, p); !seen[msg] {
						seen[msg] = true
						problems = append(problems, msg)
					}
				}
			}
		}
		if !served {
			problems = append(problems, fmt.Sprintf("%s: nats subject %s has no responder: no discovered service endpoint serves it (calls would fail transient, no responders)", m.Name, subject))
		}
	}
	return problems
}

// endpointProblems compares one endpoint's advertised schemas with a
// manifest's.
func endpointProblems(m tools.Manifest, want json.RawMessage, md map[string]string) []string {
	var out []string
	if adv := md[toolsvc.MetadataArgsSchema]; adv != "" {
		got, err := tools.EffectiveSchema(json.RawMessage(adv))
		switch {
		case err != nil:
			out = append(out, fmt.Sprintf("advertises an unusable args schema: %v", err))
		case string(got) != string(want):
			out = append(out, "advertises an args schema that differs from the manifest's: "+schemaDiff(want, got))
		}
	}
	if adv := md[toolsvc.MetadataResultSchema]; adv != "" && len(m.ResultSchema) > 0 {
		got, err1 := tools.Canonical(json.RawMessage(adv))
		mine, err2 := tools.Canonical(m.ResultSchema)
		if err1 != nil || err2 != nil || string(got) != string(mine) {
			out = append(out, "advertises a result schema that differs from the manifest's result_schema")
		}
	}
	return out
}

// schemaDiff says briefly how two effective schemas differ: properties
// only one has, else which common properties or other keywords differ.
func schemaDiff(manifest, service json.RawMessage) string {
	var a, b struct {
		Properties map[string]json.RawMessage `json:"properties"`
		Required   []string                   `json:"required"`
	}
	_ = json.Unmarshal(manifest, &a)
	_ = json.Unmarshal(service, &b)
	var parts []string
	onlyIn := func(x, y map[string]json.RawMessage) []string {
		var out []string
		for k := range x {
			if _, ok := y[k]; !ok {
				out = append(out, k)
			}
		}
		slices.Sort(out)
		return out
	}
	if only := onlyIn(a.Properties, b.Properties); len(only) > 0 {
		parts = append(parts, "only the manifest has "+strings.Join(only, ", "))
	}
	if only := onlyIn(b.Properties, a.Properties); len(only) > 0 {
		parts = append(parts, "only the service has "+strings.Join(only, ", "))
	}
	var changed []string
	for _, k := range slices.Sorted(maps.Keys(a.Properties)) {
		if v, ok := b.Properties[k]; ok && string(v) != string(a.Properties[k]) {
			changed = append(changed, k)
		}
	}
	if len(changed) > 0 {
		parts = append(parts, "they constrain "+strings.Join(changed, ", ")+" differently")
	}
	slices.Sort(a.Required)
	slices.Sort(b.Required)
	if !slices.Equal(a.Required, b.Required) {
		parts = append(parts, fmt.Sprintf("required %v vs %v", a.Required, b.Required))
	}
	if len(parts) == 0 {
		return "they differ outside properties and required"
	}
	return strings.Join(parts, "; ")
}

// subjectMatches reports whether a subscription on pattern (which may hold
// * and > wildcards) receives messages published on subject.
func subjectMatches(pattern, subject string) bool {
	p, s := strings.Split(pattern, "."), strings.Split(subject, ".")
	for i, tok := range p {
		switch {
		case tok == ">":
			return len(s) > i
		case i >= len(s):
			return false
		case tok != "*" && tok != s[i]:
			return false
		}
	}
	return len(p) == len(s)
}
