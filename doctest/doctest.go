// Package doctest finds the shell examples of Flow's Markdown documents and
// says which of them run against `flow dev`. Its test (doctest_test.go) runs
// them; docs/doctest.md describes the markers for contributors.
//
// A fenced block is marked by an HTML comment on the line right before its
// opening fence:
//
//	<!-- doctest: run seed=1 expect="demo-0000" exit=0 timeout=2m -->
//	<!-- doctest: illustrative (why it does not run) -->
//
// Every fence must name its language (`sh`, `console`, `json`, `text`, …),
// and every shell block (sh, bash, shell, console) must carry one of the two
// markers, so a new example cannot go untested by accident.
package doctest

import (
	"bufio"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"
)

// Kind says what the harness does with a block.
type Kind int

const (
	// KindNone is a block without a marker (not a shell block).
	KindNone Kind = iota
	// KindRun is run against the document's flow dev.
	KindRun
	// KindIllustrative is shown to the reader and never run.
	KindIllustrative
)

// Block is one fenced block of a document.
type Block struct {
	File string // path as given to Parse
	Line int    // 1-based line of the opening fence
	Info string // the fence's info string ("sh", "console", …)
	Text string // the block's lines, each ending in a newline
	Kind Kind
	// Options of a run block.
	Seed    int           // demo racks flow dev loads (seed=N); -1 when not given
	Exit    int           // expected exit status of the whole block (exit=N)
	Expect  []string      // substrings the output must hold (expect="…", repeatable)
	Timeout time.Duration // how long the block may take (timeout=D)
}

// DefaultTimeout is how long a run block may take unless it says otherwise.
const DefaultTimeout = 2 * time.Minute

// shellInfos are the info strings of shell blocks, which need a marker.
var shellInfos = map[string]bool{"sh": true, "bash": true, "shell": true, "console": true}

// IsShell reports whether the block is a shell block, which must be marked.
func (b Block) IsShell() bool { return shellInfos[b.Info] }

// Where names the block as file:line.
func (b Block) Where() string { return fmt.Sprintf("%s:%d", b.File, b.Line) }

const markerPrefix = "<!-- doctest:"

// Parse reads a Markdown document and returns its fenced blocks. It fails on
// a fence without an info string, a malformed marker, a marker not followed
// by a fence, a run marker on a block that is not sh/bash/shell, and an
// unclosed fence.
func Parse(file string, r io.Reader) ([]Block, error) {
	var (
		blocks  []Block
		marker  string // the pending marker's text, if the previous line was one
		markerN int
		cur     *Block
		fence   string
		n       int
	)
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		n++
		line := sc.Text()
		if cur != nil {
			if strings.TrimSpace(line) == fence {
				blocks = append(blocks, *cur)
				cur = nil
				continue
			}
			cur.Text += line + "\n"
			continue
		}
		trimmed := strings.TrimSpace(line)
		if f, info, ok := openingFence(trimmed); ok {
			if info == "" {
				return nil, fmt.Errorf("%s:%d: fence without a language: label it (sh, console, text, json, …)", file, n)
			}
			b := Block{File: file, Line: n, Info: info, Seed: -1, Timeout: DefaultTimeout}
			if marker != "" {
				if err := b.setMarker(marker); err != nil {
					return nil, fmt.Errorf("%s:%d: %w", file, markerN, err)
				}
			}
			marker = ""
			cur, fence = &b, f
			continue
		}
		if marker != "" {
			return nil, fmt.Errorf("%s:%d: doctest marker not followed by a fence on the next line", file, markerN)
		}
		if strings.HasPrefix(trimmed, markerPrefix) {
			marker, markerN = trimmed, n
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if cur != nil {
		return nil, fmt.Errorf("%s:%d: fence never closed", file, cur.Line)
	}
	if marker != "" {
		return nil, fmt.Errorf("%s:%d: doctest marker at the end of the file", file, markerN)
	}
	return blocks, nil
}

// openingFence reports whether line opens a fenced block, returning the
// fence (``` or longer, or ~~~) and the info string's first word.
func openingFence(line string) (fence, info string, ok bool) {
	for _, c := range []string{"`", "~"} {
		if !strings.HasPrefix(line, c+c+c) {
			continue
		}
		i := 0
		for i < len(line) && line[i] == c[0] {
			i++
		}
		info = strings.TrimSpace(line[i:])
		if f := strings.Fields(info); len(f) > 0 {
			info = f[0]
		}
		return line[:i], info, true
	}
	return "", "", false
}

// setMarker parses a marker comment into b.
func (b *Block) setMarker(m string) error {
	body, ok := strings.CutSuffix(strings.TrimPrefix(m, markerPrefix), "-->")
	if !ok {
		return fmt.Errorf("doctest marker must fit on one line and end with -->")
	}
	words, err := splitWords(body)
	if err != nil {
		return err
	}
	if len(words) == 0 {
		return fmt.Errorf("empty doctest marker: want run or illustrative")
	}
	switch strings.TrimSuffix(words[0], ":") {
	case "illustrative":
		b.Kind = KindIllustrative
		return nil // the rest is the reason, free text
	case "run":
		b.Kind = KindRun
	default:
		return fmt.Errorf("doctest marker %q: want run or illustrative", words[0])
	}
	if b.Info != "sh" && b.Info != "bash" && b.Info != "shell" {
		return fmt.Errorf("doctest run on a %q block: only sh, bash and shell blocks run", b.Info)
	}
	for _, w := range words[1:] {
		key, val, ok := strings.Cut(w, "=")
		if !ok {
			return fmt.Errorf("doctest option %q: want key=value", w)
		}
		switch key {
		case "seed":
			n, err := strconv.Atoi(val)
			if err != nil || n < 0 {
				return fmt.Errorf("doctest seed=%q: want a number ≥ 0", val)
			}
			b.Seed = n
		case "exit":
			n, err := strconv.Atoi(val)
			if err != nil || n < 0 {
				return fmt.Errorf("doctest exit=%q: want a number ≥ 0", val)
			}
			b.Exit = n
		case "expect":
			if val == "" {
				return fmt.Errorf("doctest expect is empty")
			}
			b.Expect = append(b.Expect, val)
		case "timeout":
			d, err := time.ParseDuration(val)
			if err != nil || d <= 0 {
				return fmt.Errorf("doctest timeout=%q: want a duration", val)
			}
			b.Timeout = d
		default:
			return fmt.Errorf("doctest option %q: want seed, exit, expect or timeout", key)
		}
	}
	return nil
}

// splitWords splits a marker's body at spaces, keeping double-quoted values
// (key="a b") whole and unquoted; \" and \\ escape inside quotes.
func splitWords(s string) ([]string, error) {
	var (
		words []string
		cur   strings.Builder
		inQ   bool
		have  bool
	)
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case inQ && c == '\\' && i+1 < len(s):
			i++
			cur.WriteByte(s[i])
		case c == '"':
			inQ = !inQ
			have = true
		case !inQ && (c == ' ' || c == '\t'):
			if have {
				words = append(words, cur.String())
				cur.Reset()
				have = false
			}
		default:
			cur.WriteByte(c)
			have = true
		}
	}
	if inQ {
		return nil, fmt.Errorf("doctest marker: unclosed quote")
	}
	if have {
		words = append(words, cur.String())
	}
	return words, nil
}
