package firmware

import (
	"cmp"
	"strconv"
	"strings"
	"unicode"
)

// CompareVersions orders two vendor firmware version strings, which are
// not semver: "1.2.00GA", "FW 1.2.00GA", "NVOS 25.02", "24.10.1-rc2",
// "GB200-BMC-2.3.1", "v1.10.3". It returns -1, 0 or +1 and ok; ok is
// false when the two cannot be ordered (other product words, "PS 3.1" and
// "FW 3.1"; or a string without a digit), and then a baseline check must
// say "unknown", never "compliant". The rules (docs/firmware.md):
//
//   - Case and surrounding space are ignored; build metadata after '+' is
//     ignored ("0.0.1+build5" = "0.0.1"); a 'v' right before the first
//     digit is ignored ("v1.2" = "1.2").
//   - The string splits at '.', '-', '_', ' ', '/' and where digits meet
//     letters into numbers and words, compared in turn.
//   - Numbers compare as numbers ("1.10" > "1.9", "1.2.00" = "1.2.0"); a
//     missing trailing part is 0 ("2.0" = "2.0.0").
//   - Release words (ga, release, final) are nothing: "1.2.00GA" = "1.2.0".
//   - Pre-release words (dev < alpha < beta < pre < rc) sort below the
//     release and below anything else at their place: "1.0-rc2" < "1.0" <
//     "1.0.1", "1.0-beta" < "1.0-rc1".
//   - A single letter is a revision suffix: above nothing or a zero, below
//     a later number ("2.1.0" < "2.1.0a" < "2.1.0b" < "2.1.1").
//   - Other words must be equal at their place ("NVOS 25.02" and "NVOS
//     25.10" compare by their numbers); different words are not ordered.
func CompareVersions(a, b string) (c int, ok bool) {
	ta, tb := versionTokens(a), versionTokens(b)
	if !hasNumber(ta) || !hasNumber(tb) {
		if strings.EqualFold(strings.TrimSpace(a), strings.TrimSpace(b)) {
			return 0, true
		}
		return 0, false
	}
	for i := range max(len(ta), len(tb)) {
		x, y := tokenAt(ta, i), tokenAt(tb, i)
		c, ok := compareTokens(x, y)
		if !ok {
			return 0, false
		}
		if c != 0 {
			return c, true
		}
	}
	return 0, true
}

type tokenKind int

const (
	tokNumber tokenKind = iota // also a missing part, as 0
	tokPre                     // pre-release word
	tokLetter                  // one-letter revision suffix
	tokWord                    // any other word
)

type versionToken struct {
	kind tokenKind
	num  uint64 // tokNumber; tokPre: its rank
	text string // tokLetter, tokWord
}

var preRank = map[string]uint64{"dev": 0, "snapshot": 0, "alpha": 1, "beta": 2, "pre": 3, "preview": 3, "rc": 4}

var releaseWords = map[string]bool{"ga": true, "release": true, "final": true}

func versionTokens(s string) []versionToken {
	s = strings.ToLower(strings.TrimSpace(s))
	if i := strings.IndexByte(s, '+'); i >= 0 {
		s = s[:i]
	}
	var out []versionToken
	seenDigit := false
	emit := func(part string, digits bool) {
		switch {
		case part == "":
		case digits:
			part = strings.TrimLeft(part, "0")
			n, err := strconv.ParseUint(cmp.Or(part, "0"), 10, 64)
			if err != nil {
				out = append(out, versionToken{kind: tokWord, text: part})
				return
			}
			out = append(out, versionToken{kind: tokNumber, num: n})
		case releaseWords[part]:
		case part == "v" && !seenDigit && len(out) == 0:
		case len(part) == 1 && seenDigit:
			// After a number a lone letter is a revision ("2.1.0a").
			out = append(out, versionToken{kind: tokLetter, text: part})
		default:
			if r, pre := preRank[part]; pre && seenDigit {
				out = append(out, versionToken{kind: tokPre, num: r})
				return
			}
			out = append(out, versionToken{kind: tokWord, text: part})
		}
	}
	var cur strings.Builder
	curDigits := false
	flush := func() {
		if cur.Len() > 0 {
			emit(cur.String(), curDigits)
			seenDigit = seenDigit || curDigits
			cur.Reset()
		}
	}
	for _, r := range s {
		if strings.ContainsRune(".-_ /", r) {
			flush()
			continue
		}
		d := unicode.IsDigit(r)
		if cur.Len() > 0 && d != curDigits {
			flush()
		}
		curDigits = d
		cur.WriteRune(r)
	}
	flush()
	return out
}

func hasNumber(ts []versionToken) bool {
	for _, t := range ts {
		if t.kind == tokNumber {
			return true
		}
	}
	return false
}

// tokenAt is ts[i], or a zero number past its end.
func tokenAt(ts []versionToken, i int) versionToken {
	if i < len(ts) {
		return ts[i]
	}
	return versionToken{kind: tokNumber}
}

func compareTokens(x, y versionToken) (int, bool) {
	switch {
	case x.kind == tokWord || y.kind == tokWord:
		return 0, x.kind == y.kind && x.text == y.text
	case x.kind == y.kind && x.kind == tokLetter:
		return cmp.Compare(x.text, y.text), true
	case x.kind == y.kind:
		return cmp.Compare(x.num, y.num), true
	case x.kind == tokPre:
		return -1, true
	case y.kind == tokPre:
		return 1, true
	case x.kind == tokLetter: // y a number
		if y.num == 0 {
			return 1, true
		}
		return -1, true
	default: // x a number, y a letter
		if x.num == 0 {
			return -1, true
		}
		return 1, true
	}
}
