package providers_test

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package if a test leaves a goroutine behind: a
// request, a retry wait or a connection that outlived its Propose.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
