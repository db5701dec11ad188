package events

import "testing"

// The operation id after n fences is the call's own for 0 and
// "<own>-f<n>" after: derived, never chosen, different for each n.
func TestFencedOperationID(t *testing.T) {
	t.Parallel()
	own := OperationID("run-1", "s1c1")
	tests := []struct {
		given int
		want  string
	}{
		{given: -1, want: own},
		{given: 0, want: own},
		{given: 1, want: own + "-f1"},
		{given: 2, want: own + "-f2"},
	}
	for _, tt := range tests {
		if got := FencedOperationID("run-1", "s1c1", tt.given); got != tt.want {
			t.Errorf("FencedOperationID(%d) = %q, want %q", tt.given, got, tt.want)
		}
	}
}
