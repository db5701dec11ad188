package toolsvc_test

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/loopgate/loopgate/tools"
	"github.com/loopgate/loopgate/toolsvc"
)

// childEnv makes the test binary, run again by crashCheck, play the
// service side of one scenario: a panic on a service goroutine kills the
// whole process, so it is observed from outside.
const childEnv = "TOOLSVC_TEST_CHILD"

// crashCheck runs test in a child process (the test binary again, only
// that test) and fails when the child dies of a panic or its test fails.
func crashCheck(t *testing.T, name string) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^"+name+"$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), childEnv+"=1")
	out, err := cmd.CombinedOutput()
	if err != nil || strings.Contains(string(out), "panic:") {
		s := string(out)
		if i := strings.Index(s, "panic:"); i >= 0 {
			s = s[i:min(len(s), i+600)]
			t.Fatalf("the service process did not survive the call (%v):\n%s", err, s)
		}
		t.Fatalf("the child test failed (%v):\n%s", err, s[:min(len(s), 3000)])
	}
}

// want500 calls greet once and fails unless the service answered 500.
func want500(t *testing.T, b *bundle) {
	t.Helper()
	_, err := b.greet(2*time.Second)(t.Context(), greetCall(`{"name":"Ada"}`))
	var re *tools.RemoteError
	if !errors.As(err, &re) || re.Code != 500 {
		t.Fatalf("err %v, want a 500 error reply", err)
	}
}

// panicky is a result whose JSON encoding panics, as a result type with a
// buggy MarshalJSON does.
type panicky struct{}

func (panicky) MarshalJSON() ([]byte, error) { panic("marshal boom") }

// A handler's panic is answered 500 (run recovers it). The result it
// returns used to be marshalled outside that recover: a result whose
// MarshalJSON panicked killed the whole tool service, and every call in
// flight on it went unanswered. Now it is a 500 too.
func TestAResultWhoseMarshalPanicsIsA500NotACrash(t *testing.T) {
	if os.Getenv(childEnv) == "" {
		t.Parallel()
		crashCheck(t, "TestAResultWhoseMarshalPanicsIsA500NotACrash")
		return
	}
	b := setup(t)
	b.start(b.svcConn, toolsvc.Config{}, func(_ context.Context, req toolsvc.Request) (any, error) {
		return panicky{}, nil
	})
	want500(t, b)
}

// A handler that returns a typed nil *toolsvc.Error (the classic Go slip:
// `var e *toolsvc.Error; …; return v, e`) used to make replyError
// dereference a nil pointer outside any recover: the service process
// died. Now it is a 500.
func TestATypedNilErrorIsA500NotACrash(t *testing.T) {
	if os.Getenv(childEnv) == "" {
		t.Parallel()
		crashCheck(t, "TestATypedNilErrorIsA500NotACrash")
		return
	}
	b := setup(t)
	b.start(b.svcConn, toolsvc.Config{}, func(_ context.Context, req toolsvc.Request) (any, error) {
		var e *toolsvc.Error
		return "hi", e
	})
	want500(t, b)
}

// isPanicky is an error whose Is method panics.
type isPanicky struct{}

func (isPanicky) Error() string   { return "is panicky" }
func (isPanicky) Is(error) bool   { panic("is boom") }
func (isPanicky) Unwrap() []error { return nil }

// Classifying a handler's error runs the error's own methods (errors.Is
// calls its Is): a panic there is a 500, as the handler's own is.
func TestAnErrorWhoseMethodsPanicIsA500NotACrash(t *testing.T) {
	if os.Getenv(childEnv) == "" {
		t.Parallel()
		crashCheck(t, "TestAnErrorWhoseMethodsPanicIsA500NotACrash")
		return
	}
	b := setup(t)
	b.start(b.svcConn, toolsvc.Config{}, func(context.Context, toolsvc.Request) (any, error) {
		return nil, isPanicky{}
	})
	want500(t, b)
}

// A result over the server's max_payload cannot be sent: the service
// answers 500 at once, a clear failure, not a silence loopgate would read
// as a timeout (outcome unknown).
func TestAResultOverMaxPayloadIsAClearFailure(t *testing.T) {
	t.Parallel()
	b := setup(t)
	big := strings.Repeat("x", int(b.svcConn.MaxPayload())+1)
	b.start(b.svcConn, toolsvc.Config{}, func(context.Context, toolsvc.Request) (any, error) {
		return map[string]string{"blob": big}, nil
	})
	began := time.Now()
	_, err := b.greet(5*time.Second)(t.Context(), greetCall(`{"name":"Ada"}`))
	var re *tools.RemoteError
	if !errors.As(err, &re) || re.Code != 500 || errors.Is(err, tools.ErrTransient) || errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err %v, want a 500 error reply", err)
	}
	if d := time.Since(began); d > 2*time.Second {
		t.Errorf("answered after %s: it waited for the deadline", d)
	}
}
