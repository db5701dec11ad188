// Package doclinks holds no code: its test checks that every relative link
// in README.md, CHANGELOG.md and docs/*.md names a file that exists and,
// for a Markdown target with a #fragment, a heading that the target has.
package doclinks
