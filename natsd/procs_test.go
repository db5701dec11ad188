package natsd

import "testing"

func TestProcsDoublesOnlyWhereEveryWriteIsAnFsync(t *testing.T) {
	for _, tc := range []struct {
		sync          string
		current, want int
	}{
		{"always", 2, 4},
		{"", 2, 4}, // the embedded default is always
		{"always", 1, 2},
		{"2m", 2, 2},
		{"1s", 8, 8},
	} {
		if got := Procs(tc.sync, tc.current); got != tc.want {
			t.Errorf("Procs(%q, %d) = %d, want %d", tc.sync, tc.current, got, tc.want)
		}
	}
}
