package edge

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"unicode/utf8"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

// StrictHeader is the request header with which a client asks for unknown
// JSON fields to be refused (value "true"); FLOW_STRICT_JSON does it for
// every client.
const StrictHeader = "Flow-Strict"

// jsonCodec is Connect's JSON codec (protojson, unknown fields accepted for
// compatibility with newer clients) with two differences: a decode error
// names the field at fault by its path in the document, not only a line
// and column, and an unknown field is remembered on the decoded message
// (unknownMarker) so that newLimitInterceptor can refuse it for strict
// clients.
type jsonCodec struct{}

func (jsonCodec) Name() string { return "json" }

func (jsonCodec) IsBinary() bool { return false }

func (jsonCodec) Marshal(message any) ([]byte, error) {
	m, ok := message.(proto.Message)
	if !ok {
		return nil, fmt.Errorf("%T is not a proto.Message", message)
	}
	return protojson.MarshalOptions{}.Marshal(m)
}

func (c jsonCodec) MarshalStable(message any) ([]byte, error) {
	b, err := c.Marshal(message)
	if err != nil {
		return nil, err
	}
	var out bytes.Buffer
	if err := json.Compact(&out, b); err != nil {
		return nil, err
	}
	return out.Bytes(), nil
}

func (jsonCodec) Unmarshal(data []byte, message any) error {
	m, ok := message.(proto.Message)
	if !ok {
		return fmt.Errorf("%T is not a proto.Message", message)
	}
	if len(data) == 0 {
		return errors.New("request body: zero-length payload is not a valid JSON object")
	}
	if err := checkJSONDepth(data); err != nil {
		return err
	}
	err := protojson.UnmarshalOptions{}.Unmarshal(data, m)
	if err == nil {
		return nil
	}
	path := jsonErrorPath(data, err)
	if strings.Contains(err.Error(), "unknown field") {
		proto.Reset(m)
		if err2 := (protojson.UnmarshalOptions{DiscardUnknown: true}).Unmarshal(data, m); err2 != nil {
			return describeJSONError(data, err2)
		}
		markUnknownJSONField(m, path)
		return nil
	}
	return describeJSONError(data, err)
}

// MaxJSONDepth is the deepest nesting of JSON objects and arrays a request
// may have. The deepest v1.Flow request nests about 8 levels (a rack's
// component's BMC in a patch); a deeper document is refused with
// invalid_argument before anything else looks at it, so no decoder, path
// search or protojson recursion ever works through thousands of levels
// (issue 28: a 60 KB body of nested arrays once cost 45 CPU-seconds).
const MaxJSONDepth = 100

// checkJSONDepth returns an error when data nests objects and arrays
// deeper than MaxJSONDepth. It is one pass over the bytes that stops at the
// first level too deep; brackets inside strings do not count.
func checkJSONDepth(data []byte) error {
	var d jsonDepth
	return d.scan(data)
}

// jsonDepth follows the nesting of a JSON document given in pieces.
type jsonDepth struct {
	depth    int
	off      int  // bytes scanned
	inString bool // inside a string
	escaped  bool // after a backslash inside a string
}

// scan takes the next piece of the document and returns an error once the
// nesting goes deeper than MaxJSONDepth.
func (d *jsonDepth) scan(p []byte) error {
	for i, c := range p {
		if d.inString {
			switch {
			case d.escaped:
				d.escaped = false
			case c == '\\':
				d.escaped = true
			case c == '"':
				d.inString = false
			}
			continue
		}
		switch c {
		case '"':
			d.inString = true
		case '{', '[':
			d.depth++
			if d.depth > MaxJSONDepth {
				return fmt.Errorf("request body: JSON nested deeper than %d levels (at byte %d)", MaxJSONDepth, d.off+i)
			}
		case '}', ']':
			d.depth--
		}
	}
	d.off += len(p)
	return nil
}

var jsonErrPos = regexp.MustCompile(`\(line (\d+):(\d+)\)`)

// jsonErrorPath returns the document path (rack.info.name,
// targets[2].id) of the token a protojson error points at, or "" when the
// error has no position.
func jsonErrorPath(data []byte, err error) string {
	sm := jsonErrPos.FindStringSubmatch(err.Error())
	if sm == nil {
		// No position (unexpected EOF): the deepest path reached.
		return jsonPathAt(data, len(data))
	}
	line, _ := strconv.Atoi(sm[1])
	col, _ := strconv.Atoi(sm[2])
	return jsonPathAt(data, byteOffset(data, line, col))
}

// describeJSONError rewrites a protojson error as "<path>: <reason> (line
// L:C)", its reason cut short.
func describeJSONError(data []byte, err error) error {
	msg := strings.TrimPrefix(err.Error(), "proto: ")
	pos := ""
	if loc := jsonErrPos.FindStringIndex(msg); loc != nil {
		pos = " " + msg[loc[0]:loc[1]]
		msg = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(msg[:loc[0]]+msg[loc[1]:]), ":"))
	}
	path := jsonErrorPath(data, err)
	if path == "" {
		path = "request body"
	}
	return fmt.Errorf("%s: %s%s", Truncate(path, 256), Truncate(strings.TrimSpace(msg), 256), pos)
}

// byteOffset converts protojson's 1-based line and rune column to a byte
// offset in data.
func byteOffset(data []byte, line, col int) int {
	off := 0
	for l := 1; l < line; l++ {
		i := bytes.IndexByte(data[off:], '\n')
		if i < 0 {
			return len(data)
		}
		off += i + 1
	}
	for c := 1; c < col && off < len(data); c++ {
		_, n := utf8.DecodeRune(data[off:])
		off += n
	}
	return off
}

// jsonPathAt returns the path of the JSON token that starts at or spans
// byte off: an object key names itself, a value the key or index it sits
// at. It returns the deepest path reached when the document is broken
// before off.
//
// It is one linear pass: the rendered path is kept in one buffer, each
// open object or array owning the segment from its start, so a token
// rewrites only the innermost segment (a path re-rendered at every token
// cost time quadratic in the nesting depth: issue 28). Callers bound the
// depth first (checkJSONDepth).
func jsonPathAt(data []byte, off int) string {
	type frame struct {
		obj     bool
		keyNext bool
		idx     int
		start   int // where the frame's segment starts in buf
	}
	var stack []frame
	var buf []byte
	// lastLen is the length of buf when the last path was taken; only
	// closing delimiters, which truncate buf without writing, follow it,
	// so buf[:lastLen] still holds that path.
	lastLen := 0
	setSegment := func(f *frame, key string, isKey bool) {
		buf = buf[:f.start]
		if isKey {
			if key == "" {
				return // an empty key names nothing
			}
			if f.start > 0 {
				buf = append(buf, '.')
			}
			buf = append(buf, key...)
			return
		}
		buf = append(buf, '[')
		buf = strconv.AppendInt(buf, int64(f.idx), 10)
		buf = append(buf, ']')
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	for {
		tok, err := dec.Token()
		if err != nil {
			return string(buf[:lastLen])
		}
		end := int(dec.InputOffset())
		var top *frame
		if len(stack) > 0 {
			top = &stack[len(stack)-1]
		}
		isKey := false
		switch t := tok.(type) {
		case json.Delim:
			if t == '}' || t == ']' {
				buf = buf[:stack[len(stack)-1].start]
				stack = stack[:len(stack)-1]
				if len(stack) > 0 && stack[len(stack)-1].obj {
					stack[len(stack)-1].keyNext = true
				}
				continue
			}
		case string:
			if top != nil && top.obj && top.keyNext {
				top.keyNext, isKey = false, true
				setSegment(top, t, true)
			}
		}
		if !isKey && top != nil && !top.obj {
			top.idx++
			setSegment(top, "", false)
		}
		lastLen = len(buf)
		if end > off {
			return string(buf)
		}
		if d, ok := tok.(json.Delim); ok {
			stack = append(stack, frame{obj: d == '{', keyNext: d == '{', idx: -1, start: len(buf)})
			continue
		}
		if !isKey && top != nil && top.obj {
			top.keyNext = true
		}
	}
}

// unknownMarker is the field number under which jsonCodec records, in a
// decoded message's unknown fields, the path of an unknown JSON field it
// dropped. newLimitInterceptor always removes it, so handlers never see it.
const unknownMarker protowire.Number = protowire.MaxValidNumber

func markUnknownJSONField(m proto.Message, path string) {
	b := protowire.AppendTag(nil, unknownMarker, protowire.BytesType)
	b = protowire.AppendString(b, path)
	r := m.ProtoReflect()
	r.SetUnknown(append(r.GetUnknown(), b...))
}

// takeUnknownJSONField removes jsonCodec's marker from m and returns the
// path it recorded ("" when there is none).
func takeUnknownJSONField(m proto.Message) string {
	r := m.ProtoReflect()
	raw := r.GetUnknown()
	if len(raw) == 0 {
		return ""
	}
	var kept []byte
	path := ""
	for len(raw) > 0 {
		num, typ, n := protowire.ConsumeTag(raw)
		if n < 0 {
			return path
		}
		m := protowire.ConsumeFieldValue(num, typ, raw[n:])
		if m < 0 {
			return path
		}
		if num == unknownMarker && typ == protowire.BytesType {
			v, _ := protowire.ConsumeString(raw[n:])
			path = v
		} else {
			kept = append(kept, raw[:n+m]...)
		}
		raw = raw[n+m:]
	}
	if path != "" {
		r.SetUnknown(kept)
	}
	return path
}

// strictHeader reports whether the request asks for strict JSON.
func strictHeader(h http.Header) bool {
	b, err := strconv.ParseBool(strings.TrimSpace(h.Get(StrictHeader)))
	return err == nil && b
}

func strictReason(lim Limits) string {
	if lim.StrictJSON {
		return "FLOW_STRICT_JSON=true"
	}
	return StrictHeader + ": true"
}

// jsonCharsetCodec is jsonCodec under the second name Connect registers
// JSON by.
type jsonCharsetCodec struct{ jsonCodec }

func (jsonCharsetCodec) Name() string { return "json; charset=utf-8" }
