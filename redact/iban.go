package redact

import (
	"regexp"
	"strings"
)

// ibanShape matches what may be an IBAN: a country code, two check
// digits and the account (BBAN), in one piece or in groups of four
// separated by single spaces, letters in either case. ibanMarker keeps
// only what ibanValid confirms.
var ibanShape = regexp.MustCompile(`\b[A-Za-z]{2}\d{2}(?: ?[A-Za-z0-9]{4}){2,7}(?: ?[A-Za-z0-9]{1,3})?\b`)

// ibanMarker is what m, a match of ibanShape, becomes: "[iban]" if it is
// an IBAN, or begins with one followed by more groups ("DE89 3704 0044
// 0532 0130 00 2026" is read up to its last group); else m.
func ibanMarker(m string) string {
	for end := len(m); end > 0; end = strings.LastIndexByte(m[:end], ' ') {
		if ibanValid(m[:end]) {
			return "[iban]" + m[end:]
		}
	}
	return m
}

// ibanValid reports whether s, spaces aside, is an IBAN: a country code
// of the ISO 13616 registry, as many characters as that country's IBANs
// have, and the ISO 7064 MOD 97-10 check (the number formed by the BBAN,
// the country code and the check digits, letters as 10 to 35, leaves 1
// divided by 97).
func ibanValid(s string) bool {
	var buf [40]byte
	compact := buf[:0]
	for i := 0; i < len(s); i++ {
		b := s[i]
		switch {
		case b == ' ':
			continue
		case 'a' <= b && b <= 'z':
			b -= 'a' - 'A'
		}
		if len(compact) == cap(compact) {
			return false
		}
		compact = append(compact, b)
	}
	if len(compact) < 4 || ibanLengths[string(compact[:2])] != len(compact) {
		return false
	}
	rem := 0
	for k := range compact {
		b := compact[(k+4)%len(compact)]
		switch {
		case isDigit(b):
			rem = (rem*10 + int(b-'0')) % 97
		case 'A' <= b && b <= 'Z':
			rem = (rem*100 + int(b-'A') + 10) % 97
		default:
			return false
		}
	}
	return rem == 1
}

// ibanLengths is the length of each country's IBANs (ISO 13616 registry).
var ibanLengths = map[string]int{
	"AD": 24, "AE": 23, "AL": 28, "AT": 20, "AZ": 28, "BA": 20, "BE": 16, "BG": 22, "BH": 22, "BI": 27,
	"BR": 29, "BY": 28, "CH": 21, "CR": 22, "CY": 28, "CZ": 24, "DE": 22, "DJ": 27, "DK": 18, "DO": 28,
	"EE": 20, "EG": 29, "ES": 24, "FI": 18, "FK": 18, "FO": 18, "FR": 27, "GB": 22, "GE": 22, "GI": 23,
	"GL": 18, "GR": 27, "GT": 28, "HN": 28, "HR": 21, "HU": 28, "IE": 22, "IL": 23, "IQ": 23, "IS": 26,
	"IT": 27, "JO": 30, "KW": 30, "KZ": 20, "LB": 28, "LC": 32, "LI": 21, "LT": 20, "LU": 20, "LV": 21,
	"LY": 25, "MC": 27, "MD": 24, "ME": 22, "MK": 19, "MN": 20, "MR": 27, "MT": 31, "MU": 30, "NI": 28,
	"NL": 18, "NO": 15, "OM": 23, "PK": 24, "PL": 28, "PS": 29, "PT": 25, "QA": 29, "RO": 24, "RS": 22,
	"RU": 33, "SA": 24, "SC": 31, "SD": 18, "SE": 24, "SI": 19, "SK": 24, "SM": 27, "SO": 23, "ST": 25,
	"SV": 28, "TL": 23, "TN": 24, "TR": 26, "UA": 29, "VA": 22, "VG": 24, "XK": 20, "YE": 30,
}
