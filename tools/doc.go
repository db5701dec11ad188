// Package tools is the closed world of what a model may ask for: the
// registry built from tool manifests, strict argument validation against
// each tool's JSON Schema, the canonical JSON and hash that name "the same
// arguments", the designed views that turn results into bounded
// observations, and the executors that run calls.
package tools
