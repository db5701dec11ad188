package providers

import (
	"cmp"
	"encoding/json"
	"fmt"
	"slices"

	"github.com/loopgate/loopgate/events"
)

// A conversation is a run's History in the shape both chat protocols
// share: the task, each assistant turn, and after an assistant turn with
// tool calls one round holding a result for each of its calls, carrying the
// call's id. The HTTP providers map it onto their wire types.
type conversation []message

type messageKind int

const (
	userMessage      messageKind = iota // the task, session memory, or an error about an invalid decision
	assistantMessage                    // a decision, or an invalid output
	resultsMessage                      // the results of the previous assistant message's calls
)

type message struct {
	kind messageKind
	// text is a user message's, or an assistant message's when rebuilt.
	text string
	// verbatim is the assistant message as the provider sent it; when set,
	// it is replayed instead of text and calls.
	verbatim json.RawMessage
	// calls are a rebuilt assistant message's tool calls.
	calls []call
	// results answer the calls of the assistant message before, in the
	// order loopgate observed them.
	results []result
}

type call struct {
	ID   string
	Name string
	Args json.RawMessage
}

type result struct {
	// CallID is the provider's id of the call answered.
	CallID  string
	Content string
	// IsError marks an observation that says the call did not succeed.
	IsError bool
}

// buildConversation rebuilds a run's history for a provider. callIDs
// returns the tool-call ids of an assistant message the provider sent
// (Turn.ProviderMessage).
//
// The rules: the session's memory, if any, and the task are user messages;
// an assistant turn is the provider's own message when there is one, else rebuilt from the decision (each call under its provider id, or
// loopgate's when the provider gave none) or from the invalid output. The
// observations after it form one round of results, each carrying the id of
// the call it answers. An error about an invalid decision is a user message
// — unless the invalid turn was a provider message with tool calls (a
// malformed arguments string), which the protocols require to be answered
// call by call: then each of its calls gets the error as its result. A
// history that breaks the rules (a call left without a result, a result
// answering no call) is an error, not a request the provider would refuse.
func buildConversation(history []events.Turn, callIDs func(json.RawMessage) ([]string, error)) (conversation, error) {
	var (
		conv    conversation
		pending []string          // provider ids of the last assistant message's calls still unanswered
		idOf    map[string]string // loopgate call id → the id the provider knows it by
		step    int               // of the last assistant message
	)
	unanswered := func() error {
		if len(pending) > 0 {
			return fmt.Errorf("history: the assistant turn of step %d has calls with no result: %q", step, pending)
		}
		return nil
	}
	for i, t := range history {
		switch t.Role {
		case events.RoleUser:
			if err := unanswered(); err != nil {
				return nil, err
			}
			conv = append(conv, message{kind: userMessage, text: contentText(t.Content)})
		case events.RoleSession:
			if err := unanswered(); err != nil {
				return nil, err
			}
			conv = append(conv, message{kind: userMessage, text: sessionPreamble + contentText(t.Content)})
		case events.RoleAssistant:
			if err := unanswered(); err != nil {
				return nil, err
			}
			step = t.Step
			m := message{kind: assistantMessage}
			idOf = map[string]string{}
			if t.Decision != nil {
				for _, c := range t.Decision.ToolCalls {
					idOf[c.ID] = cmp.Or(c.ProviderID, c.ID)
				}
			}
			switch {
			case len(t.ProviderMessage) > 0:
				ids, err := callIDs(t.ProviderMessage)
				if err != nil {
					return nil, fmt.Errorf("history: the provider message of step %d: %w", t.Step, err)
				}
				m.verbatim, pending = t.ProviderMessage, ids
			case t.Decision != nil && len(t.Decision.ToolCalls) > 0:
				for _, c := range t.Decision.ToolCalls {
					m.calls = append(m.calls, call{ID: idOf[c.ID], Name: c.Tool, Args: c.Args})
					pending = append(pending, idOf[c.ID])
				}
			case t.Decision != nil && t.Decision.Final != nil:
				m.text = t.Decision.Final.Summary
			default:
				m.text = contentText(t.Content)
			}
			conv = append(conv, m)
		case events.RoleObservation:
			content := contentText(t.Content)
			if t.CallID == "" {
				if len(pending) == 0 {
					conv = append(conv, message{kind: userMessage, text: content})
					continue
				}
				r := &conv.round().results
				for _, id := range pending {
					*r = append(*r, result{CallID: id, Content: content, IsError: true})
				}
				pending = nil
				continue
			}
			id := cmp.Or(t.ProviderCallID, idOf[t.CallID], t.CallID)
			at := slices.Index(pending, id)
			if at < 0 {
				return nil, fmt.Errorf("history: turn %d: the observation of call %s (provider id %q) answers no unanswered call of the assistant turn before it", i, t.CallID, id)
			}
			pending = slices.Delete(pending, at, at+1)
			r := &conv.round().results
			*r = append(*r, result{CallID: id, Content: content, IsError: isErrorObservation(t.Content)})
		default:
			return nil, fmt.Errorf("history: turn %d has unknown role %q", i, t.Role)
		}
	}
	if err := unanswered(); err != nil {
		return nil, err
	}
	return conv, nil
}

// sessionPreamble introduces the memory of a session's earlier runs (an
// events.SessionContext as JSON), which comes before the task.
const sessionPreamble = "Memory of this session's earlier runs (JSON): "

// round returns the results message answering the last assistant message,
// appending it if the last message is not one.
func (c *conversation) round() *message {
	if n := len(*c); n > 0 && (*c)[n-1].kind == resultsMessage {
		return &(*c)[n-1]
	}
	*c = append(*c, message{kind: resultsMessage})
	return &(*c)[len(*c)-1]
}

// contentText is a turn's content as the model reads it: a JSON string's
// text, any other JSON as written.
func contentText(raw json.RawMessage) string {
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		return s
	}
	return string(raw)
}

// isErrorObservation reports whether an observation says its call did not
// succeed ("status": "error").
func isErrorObservation(raw json.RawMessage) bool {
	var o struct {
		Status string `json:"status"`
	}
	return json.Unmarshal(raw, &o) == nil && o.Status == "error"
}
