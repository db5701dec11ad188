// Package nodetool holds the Go test of the Node.js tool service in this
// directory (tool.js): it starts the service against an embedded
// nats-server and calls it through loopgate's NATS executor, the way a
// worker would, proving the remote tool contract is not Go's alone.
//
// The test needs node on PATH and node_modules installed (npm ci in this
// directory; .ci/run does it); without them it skips and says so.
package nodetool
