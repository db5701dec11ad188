package tools

import (
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
)

// FuzzDecodeReply feeds the NATS executor replies a tool service could
// send: whatever they hold, decoding must not panic, a result must be
// JSON, and an error's description must stay bounded valid UTF-8.
func FuzzDecodeReply(f *testing.F) {
	f.Add([]byte(`{"result":{"ok":true}}`), "", "")
	f.Add([]byte(`{"result":null}`), "", "")
	f.Add([]byte(`{"answer":1}`), "", "")
	f.Add([]byte(``), "503", "unavailable")
	f.Add([]byte(`x`), "4x0", strings.Repeat("é", 400))
	f.Add([]byte(`[{"result":1}]`), "", "\xff\xfe")
	rs, err := compileResultSchema(json.RawMessage(`{"type":"object","properties":{"ok":{"type":"boolean"}}}`))
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, body []byte, code, desc string) {
		h := nats.Header{}
		if code != "" {
			h.Set(micro.ErrorCodeHeader, code)
		}
		if desc != "" {
			h.Set(micro.ErrorHeader, desc)
		}
		for _, schema := range []*resultSchema{nil, rs} {
			v, err := decodeReply("t", "s", &nats.Msg{Header: h, Data: body}, schema)
			if err == nil {
				raw, ok := v.(json.RawMessage)
				if !ok || !json.Valid(raw) {
					t.Fatalf("result %q is not JSON", v)
				}
				continue
			}
			if re, ok := err.(*RemoteError); ok {
				if !utf8.ValidString(re.Description) || len(re.Description) > maxDescription+len("…") {
					t.Fatalf("description %q", re.Description)
				}
			}
		}
	})
}
