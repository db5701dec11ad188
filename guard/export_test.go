package guard

import "slices"

// InspectUnconditionally is Inspect without cues, every expression run:
// the reference the cues are held to.
func InspectUnconditionally(text string) []Flag {
	var flags []Flag
	for _, d := range detectors {
		if !slices.Contains(flags, d.flag) && d.re.MatchString(text) {
			flags = append(flags, d.flag)
		}
	}
	slices.Sort(flags)
	return flags
}

// Fold is fold.
func Fold(s string) string { return fold(s) }

// RawMayFlag is rawMayFlag: false when InspectJSON returns no flags
// without decoding raw.
func RawMayFlag(raw []byte) bool { return rawMayFlag(raw) }

// JSONText returns the text InspectJSON inspects for raw: the decoded
// names and strings in document order, or raw itself when it is not JSON.
func JSONText(raw []byte) string {
	if text, ok := jsonText(raw); ok {
		return text
	}
	return string(raw)
}
