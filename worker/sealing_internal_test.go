package worker

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/google/uuid"

	"github.com/loopgate/loopgate/events"
)

// sealedSize bounds what a call's sealed member adds to its event, so a
// decision whose sealed copy the stream could not take is refused before
// it is stored, not on every try after.
func TestSealedSizeBoundsTheSealedMember(t *testing.T) {
	t.Parallel()
	for _, n := range []int{0, 1, 2, 3, 100, 4096, 256 << 10} {
		member, err := json.Marshal(struct {
			Sealed *events.Sealed `json:"sealed"`
		}{&events.Sealed{Key: uuid.NewString(), Nonce: make([]byte, 12), Box: bytes.Repeat([]byte{0xff}, n+16)}})
		if err != nil {
			t.Fatal(err)
		}
		if added := len(member) - len(`{}`) + len(`,`); sealedSize(n) < added {
			t.Errorf("sealedSize(%d) = %d, but the member adds %d bytes", n, sealedSize(n), added)
		}
	}
}
