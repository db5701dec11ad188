package cli

import (
	"bytes"
	"encoding/json"
	"testing"
	"time"
)

// JSON logs write durations as the flags take them ("2s"), not as
// nanoseconds; nested in a group, too.
func TestJSONLogsWriteDurationsAsDurations(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	log, err := newLogger(&out, "json", "info")
	if err != nil {
		t.Fatal(err)
	}
	log.Warn("trying again", "in", 2*time.Second, "try", 3, "group", map[string]int{"n": 1})
	log.WithGroup("lease").Info("ends", "after", 90*time.Second)
	dec := json.NewDecoder(&out)
	var first, second map[string]any
	if err := dec.Decode(&first); err != nil {
		t.Fatal(err)
	}
	if err := dec.Decode(&second); err != nil {
		t.Fatal(err)
	}
	if first["in"] != "2s" || first["try"] != float64(3) {
		t.Errorf("logged %v, want in \"2s\" and try 3", first)
	}
	if lease, _ := second["lease"].(map[string]any); lease["after"] != "1m30s" {
		t.Errorf("logged %v, want lease.after \"1m30s\"", second)
	}
}
