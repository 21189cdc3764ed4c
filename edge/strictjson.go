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
	"google.golang.org/protobuf/reflect/protoreflect"
)

// StrictHeader is the request header with which a client asks for unknown
// JSON fields to be refused (value "true"); FLOW_STRICT_JSON does it for
// every client.
const StrictHeader = "Flow-Strict"

// jsonCodec is Connect's JSON codec (protojson, unknown fields accepted for
// compatibility with newer clients) with two differences: a decode error
// names the field at fault by its path in the document, not only a line
// and column, and the paths of the unknown fields are remembered on the
// decoded message (unknownMarker) so that newIgnoredFieldsInterceptor can
// name them to the client and newLimitInterceptor can refuse them for
// strict clients.
type jsonCodec struct{}

func (jsonCodec) Name() string { return "json" }

func (jsonCodec) IsBinary() bool { return false }

func (jsonCodec) Marshal(message any) ([]byte, error) {
	m, ok := message.(proto.Message)
	if !ok {
		return nil, fmt.Errorf("%T is not a proto.Message", message)
	}
	if doc, ok := preencodedJSON(m); ok {
		// Connect recycles what Marshal returns: never the handler's own.
		return bytes.Clone(doc), nil
	}
	return protojson.MarshalOptions{}.Marshal(m)
}

// MarshalAppend is Marshal appending to b (Connect's pooled buffer), so
// an answer's encoding reuses buffers instead of allocating one per call.
func (jsonCodec) MarshalAppend(b []byte, message any) ([]byte, error) {
	m, ok := message.(proto.Message)
	if !ok {
		return nil, fmt.Errorf("%T is not a proto.Message", message)
	}
	if doc, ok := preencodedJSON(m); ok {
		return append(b, doc...), nil
	}
	return protojson.MarshalOptions{}.MarshalAppend(b, m)
}

// PreencodedJSONField is the field number under which a handler hands the
// JSON codec an answer already encoded as JSON (a listing's cached page:
// inventory.JSONPageField is the same number): a message whose only
// content is that one length-delimited unknown field is written as the
// field's value, as it is.
const PreencodedJSONField protowire.Number = protowire.MaxValidNumber - 1

// preencodedJSON returns the JSON document m carries as
// PreencodedJSONField, if that is all m holds.
func preencodedJSON(m proto.Message) ([]byte, bool) {
	r := m.ProtoReflect()
	raw := r.GetUnknown()
	num, typ, n := protowire.ConsumeTag(raw)
	if n < 0 || num != PreencodedJSONField || typ != protowire.BytesType {
		return nil, false
	}
	doc, k := protowire.ConsumeBytes(raw[n:])
	if k < 0 || n+k != len(raw) {
		return nil, false
	}
	populated := false
	r.Range(func(protoreflect.FieldDescriptor, protoreflect.Value) bool {
		populated = true
		return false
	})
	return doc, !populated
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
	if !isUnknownFieldError(err) {
		return describeJSONError(data, err)
	}
	// protojson stops at the first unknown field: name it, cut it out of
	// the document and decode again, until the document decodes or the
	// paths are as many as the document's size allows. protojson stays
	// the one judge of what is unknown (JSON and proto names, well-known
	// types), for the header and strict mode alike. With one unknown
	// field this costs what it did when the second decode dropped it.
	most := MaxIgnoredFields
	if len(data) > maxIgnoredFieldsScan {
		most = 1
	}
	var paths []string
	doc := data
	for {
		if len(paths) == most {
			paths = append(paths, moreIgnoredFields)
			break
		}
		paths = append(paths, jsonErrorPath(doc, err))
		off, ok := jsonErrorOffset(doc, err)
		if !ok {
			break
		}
		if doc, ok = cutJSONMember(doc, off); !ok {
			break
		}
		proto.Reset(m)
		if err = (protojson.UnmarshalOptions{}).Unmarshal(doc, m); err == nil {
			markUnknownJSONFields(m, paths)
			return nil
		}
		if !isUnknownFieldError(err) {
			break
		}
	}
	// What remains is decoded as before: unknown fields dropped, an error
	// described against the document the client sent.
	proto.Reset(m)
	if err := (protojson.UnmarshalOptions{DiscardUnknown: true}).Unmarshal(data, m); err != nil {
		return describeJSONError(data, err)
	}
	markUnknownJSONFields(m, paths)
	return nil
}

// MaxIgnoredFields is the most unknown fields jsonCodec names for a
// request of up to 64 KiB (maxIgnoredFieldsScan); it names only the first
// in a larger one. Past the limit the list ends with "...". Each field
// named costs one more decode of the document, so a large body cannot
// multiply the CPU it costs.
const MaxIgnoredFields = 8

// maxIgnoredFieldsScan is the largest document in which jsonCodec names up
// to MaxIgnoredFields unknown fields.
const maxIgnoredFieldsScan = 64 << 10

// moreIgnoredFields ends a list of unknown fields cut at MaxIgnoredFields.
const moreIgnoredFields = "..."

func isUnknownFieldError(err error) bool {
	return strings.Contains(err.Error(), "unknown field")
}

// cutJSONMember returns a copy of doc without the object member whose key
// starts at byte off, and false when off is not at a key followed by a
// value and a comma and key, or the end of the object. It cuts only what
// protojson would have read past too (its strings are valid UTF-8 without
// surrogate escapes; encoding/json accepts both), so a document it
// refused before is refused still.
func cutJSONMember(doc []byte, off int) ([]byte, bool) {
	if off <= 0 || off >= len(doc) || doc[off] != '"' {
		return nil, false
	}
	var key string
	dec := json.NewDecoder(bytes.NewReader(doc[off:]))
	if dec.Decode(&key) != nil {
		return nil, false
	}
	colon := skipJSONSpace(doc, off+int(dec.InputOffset()))
	if colon >= len(doc) || doc[colon] != ':' {
		return nil, false
	}
	value := skipJSONSpace(doc, colon+1)
	var raw json.RawMessage
	dec = json.NewDecoder(bytes.NewReader(doc[value:]))
	if dec.Decode(&raw) != nil || !utf8.Valid(raw) || jsonSurrogateEscape.Match(raw) {
		return nil, false
	}
	start, end := off, skipJSONSpace(doc, value+int(dec.InputOffset()))
	switch {
	case end < len(doc) && doc[end] == ',':
		// The member and the comma after it, if a member follows.
		end++
		if next := skipJSONSpace(doc, end); next >= len(doc) || doc[next] != '"' {
			return nil, false
		}
	case end < len(doc) && doc[end] == '}':
		// The last member: the comma before it goes, if any.
		if before := skipJSONSpaceBack(doc, off); before >= 0 && doc[before] == ',' {
			start = before
		}
	default:
		return nil, false
	}
	out := make([]byte, 0, len(doc)-(end-start))
	out = append(append(out, doc[:start]...), doc[end:]...)
	return out, true
}

// jsonSurrogateEscape matches an escaped UTF-16 surrogate, which protojson
// accepts only as a valid pair.
var jsonSurrogateEscape = regexp.MustCompile(`\\u[dD][89a-fA-F]`)

// skipJSONSpace returns the offset of the first byte at or after i that is
// not JSON whitespace.
func skipJSONSpace(doc []byte, i int) int {
	for i < len(doc) && isJSONSpace(doc[i]) {
		i++
	}
	return i
}

// skipJSONSpaceBack returns the offset of the last byte before i that is
// not JSON whitespace, or -1.
func skipJSONSpaceBack(doc []byte, i int) int {
	i--
	for i >= 0 && isJSONSpace(doc[i]) {
		i--
	}
	return i
}

func isJSONSpace(c byte) bool {
	return c == ' ' || c == '\t' || c == '\n' || c == '\r'
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
	off, ok := jsonErrorOffset(data, err)
	if !ok {
		// No position (unexpected EOF): the deepest path reached.
		return jsonPathAt(data, len(data))
	}
	return jsonPathAt(data, off)
}

// jsonErrorOffset returns the byte offset in data a protojson error points
// at, and false when the error has no position.
func jsonErrorOffset(data []byte, err error) (int, bool) {
	sm := jsonErrPos.FindStringSubmatch(err.Error())
	if sm == nil {
		return 0, false
	}
	line, _ := strconv.Atoi(sm[1])
	col, _ := strconv.Atoi(sm[2])
	return byteOffset(data, line, col), true
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
// decoded message's unknown fields, the paths of the unknown JSON fields it
// dropped, one record each. newLimitInterceptor always removes them, so
// handlers never see them.
const unknownMarker protowire.Number = protowire.MaxValidNumber

// maxIgnoredPath bounds each recorded path: a client's key may be of any
// length, and the path goes into a header and a log line.
const maxIgnoredPath = 256

func markUnknownJSONFields(m proto.Message, paths []string) {
	r := m.ProtoReflect()
	b := r.GetUnknown()
	for _, p := range paths {
		b = protowire.AppendTag(b, unknownMarker, protowire.BytesType)
		b = protowire.AppendString(b, Truncate(p, maxIgnoredPath))
	}
	r.SetUnknown(b)
}

// unknownJSONFields returns the paths jsonCodec recorded on m (nil when
// there are none), leaving them there.
func unknownJSONFields(m proto.Message) []string {
	paths, _ := scanUnknownJSONFields(m)
	return paths
}

// takeUnknownJSONFields removes jsonCodec's records from m and returns the
// paths they held (nil when there are none).
func takeUnknownJSONFields(m proto.Message) []string {
	paths, kept := scanUnknownJSONFields(m)
	if paths != nil {
		m.ProtoReflect().SetUnknown(kept)
	}
	return paths
}

// scanUnknownJSONFields returns the paths jsonCodec recorded on m and m's
// other unknown fields.
func scanUnknownJSONFields(m proto.Message) (paths []string, kept []byte) {
	raw := m.ProtoReflect().GetUnknown()
	for len(raw) > 0 {
		num, typ, n := protowire.ConsumeTag(raw)
		if n < 0 {
			return paths, append(kept, raw...)
		}
		m := protowire.ConsumeFieldValue(num, typ, raw[n:])
		if m < 0 {
			return paths, append(kept, raw...)
		}
		if num == unknownMarker && typ == protowire.BytesType {
			v, _ := protowire.ConsumeString(raw[n:])
			paths = append(paths, v)
		} else {
			kept = append(kept, raw[:n+m]...)
		}
		raw = raw[n+m:]
	}
	return paths, kept
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
