package doclinks

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

const root = "../.."

// markdownFiles returns README.md, CHANGELOG.md and every docs/*.md,
// relative to the repository root.
func markdownFiles(t *testing.T) []string {
	t.Helper()
	docs, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	if len(docs) == 0 {
		t.Fatal("no docs/*.md found")
	}
	files := []string{filepath.Join(root, "README.md"), filepath.Join(root, "CHANGELOG.md")}
	return append(files, docs...)
}

var (
	fence      = regexp.MustCompile("(?ms)^```.*?^```")
	inlineCode = regexp.MustCompile("`[^`\n]*`")
	link       = regexp.MustCompile(`\]\(([^)\s]+)\)`)
	heading    = regexp.MustCompile(`(?m)^#{1,6} +(.+?) *$`)
	notSlug    = regexp.MustCompile(`[^\p{L}\p{N}\- _]`)
)

// prose returns s without fenced code blocks and inline code, where
// bracketed text is not a link.
func prose(s string) string {
	return inlineCode.ReplaceAllString(fence.ReplaceAllString(s, ""), "")
}

// anchors returns the fragment ids GitHub gives the headings of s.
func anchors(s string) map[string]bool {
	ids := map[string]bool{}
	seen := map[string]int{}
	for _, m := range heading.FindAllStringSubmatch(fence.ReplaceAllString(s, ""), -1) {
		id := strings.ToLower(strings.ReplaceAll(m[1], "`", ""))
		id = strings.ReplaceAll(notSlug.ReplaceAllString(id, ""), " ", "-")
		if n := seen[id]; n > 0 {
			ids[id+"-"+strconv.Itoa(n)] = true
		} else {
			ids[id] = true
		}
		seen[id]++
	}
	return ids
}

// Every relative link of the README and the docs resolves: the file (or
// directory) exists, and a #fragment names a heading of the Markdown file
// it points into. The README's reference moved to docs/ in pieces; a link
// left pointing at a section that moved fails here.
func TestEveryRelativeLinkResolves(t *testing.T) {
	t.Parallel()
	for _, file := range markdownFiles(t) {
		raw, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		name, _ := filepath.Rel(root, file)
		for _, m := range link.FindAllStringSubmatch(prose(string(raw)), -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			path, frag, _ := strings.Cut(target, "#")
			dest := file
			if path != "" {
				dest = filepath.Join(filepath.Dir(file), path)
				if _, err := os.Stat(dest); err != nil {
					t.Errorf("%s: link %q: %s does not exist", name, target, path)
					continue
				}
			}
			if frag == "" || !strings.HasSuffix(dest, ".md") {
				continue
			}
			body, err := os.ReadFile(dest)
			if err != nil {
				t.Errorf("%s: link %q: %v", name, target, err)
				continue
			}
			if !anchors(string(body))[frag] {
				t.Errorf("%s: link %q: %s has no heading #%s", name, target, path, frag)
			}
		}
	}
}
