package cli

import (
	"flag"
	"fmt"
	"regexp"
	"strings"
)

// singleDash matches a flag name as Go's flag package writes it in an
// error: "flag -name" or ": -name".
var singleDash = regexp.MustCompile(`(flag |: )-([a-zA-Z])`)

// suggest returns the candidate a mistyped word most likely meant, or ""
// when none is close: the one at the smallest edit distance (insertions,
// deletions, substitutions and swaps of two adjacent letters), if that is
// at most 1 for a word of up to 4 letters and at most 2 for a longer one;
// else the only candidate that starts with the word, if it has at least 2
// letters. Ties go to the first candidate.
func suggest(word string, candidates []string) string {
	if word == "" {
		return ""
	}
	limit := 1
	if len(word) > 4 {
		limit = 2
	}
	best, bestD := "", limit+1
	for _, c := range candidates {
		if d := editDistance(strings.ToLower(word), c); d < bestD {
			best, bestD = c, d
		}
	}
	if best != "" {
		return best
	}
	if len(word) < 2 {
		return ""
	}
	var prefixed []string
	for _, c := range candidates {
		if strings.HasPrefix(c, strings.ToLower(word)) {
			prefixed = append(prefixed, c)
		}
	}
	if len(prefixed) == 1 {
		return prefixed[0]
	}
	return ""
}

// editDistance is the optimal string alignment distance between a and b,
// byte-wise: the fewest insertions, deletions, substitutions and swaps of
// two adjacent bytes that turn a into b.
func editDistance(a, b string) int {
	prev2 := make([]int, len(b)+1)
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
			if i > 1 && j > 1 && a[i-1] == b[j-2] && a[i-2] == b[j-1] {
				cur[j] = min(cur[j], prev2[j-2]+1)
			}
		}
		prev2, prev, cur = prev, cur, prev2
	}
	return prev[len(b)]
}

// didYouMean is "; did you mean X?" naming the candidate suggest finds
// for word, written as format writes one, or "" when none is close.
func didYouMean(word string, candidates []string, format string) string {
	if s := suggest(word, candidates); s != "" {
		return "; did you mean " + fmt.Sprintf(format, s) + "?"
	}
	return ""
}

// flagNames are the names of the flags fs defines.
func flagNames(fs *flag.FlagSet) []string {
	var names []string
	fs.VisitAll(func(f *flag.Flag) { names = append(names, f.Name) })
	return names
}

// flagError is what a command prints for err, an error of fs.Parse other
// than flag.ErrHelp: the error, with the flag the user most likely meant
// for one fs does not define, and where the command's flags are listed;
// not the whole usage.
func flagError(fs *flag.FlagSet, err error) string {
	// Go's flag package names a flag -name; loopgate writes --name.
	msg := singleDash.ReplaceAllString(err.Error(), "$1--$2")
	if name, ok := strings.CutPrefix(msg, "flag provided but not defined: "); ok {
		name = strings.TrimLeft(name, "-")
		if i := strings.IndexByte(name, '='); i >= 0 {
			name = name[:i]
		}
		msg = fmt.Sprintf("unknown flag --%s%s", name, didYouMean(name, flagNames(fs), "--%s"))
	}
	return fmt.Sprintf("%s: %s\nRun '%s -h' for its flags.", fs.Name(), msg, fs.Name())
}
