// Package soak holds loopgate's slow fault tests. They run real processes
// (the loopgate binary as worker processes, nats-server binaries for a
// cluster), kill them at chosen points and check that no run is lost,
// stuck or duplicated and that no side effect happens twice.
//
// Every test file is behind the build tag soak, so `go test ./...` skips
// them; run them with `make soak` (go test -tags soak -count=1 -timeout 30m
// -v ./soak). docs/soak.md says what each test does and what it measured.
package soak
