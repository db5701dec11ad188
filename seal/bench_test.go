package seal_test

import (
	"testing"
)

// BenchmarkSeal is one call's arguments sealed: a read of the tenant's
// key entry (from the bucket's leader) and one AES-GCM seal.
func BenchmarkSeal(b *testing.B) {
	kr := benchKeyring(b)
	args := []byte(`{"reason":"Open 9 days; the resident (jane.roe@example.com, 555-867-5309) called twice.","request_id":"SR-10421"}`)
	for b.Loop() {
		if _, err := kr.Seal(b.Context(), "cityops", args, []byte("run\x00call\x00validated")); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkOpen is one call's sealed arguments opened by a worker that
// takes the run up.
func BenchmarkOpen(b *testing.B) {
	kr := benchKeyring(b)
	s, err := kr.Seal(b.Context(), "cityops", []byte(`{"request_id":"SR-10421"}`), nil)
	if err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if _, err := kr.Open(b.Context(), "cityops", s, nil); err != nil {
			b.Fatal(err)
		}
	}
}
