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
func jsonPathAt(data []byte, off int) string {
	type frame struct {
		obj     bool
		keyNext bool
		key     string
		idx     int
	}
	var stack []*frame
	render := func() string {
		var b strings.Builder
		for _, f := range stack {
			switch {
			case f.obj && f.key != "":
				if b.Len() > 0 {
					b.WriteByte('.')
				}
				b.WriteString(f.key)
			case !f.obj && f.idx >= 0:
				fmt.Fprintf(&b, "[%d]", f.idx)
			}
		}
		return b.String()
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	last := ""
	for {
		tok, err := dec.Token()
		if err != nil {
			return last
		}
		end := int(dec.InputOffset())
		var top *frame
		if len(stack) > 0 {
			top = stack[len(stack)-1]
		}
		isKey := false
		switch t := tok.(type) {
		case json.Delim:
			if t == '}' || t == ']' {
				stack = stack[:len(stack)-1]
				if len(stack) > 0 && stack[len(stack)-1].obj {
					stack[len(stack)-1].keyNext = true
				}
				continue
			}
		case string:
			if top != nil && top.obj && top.keyNext {
				top.key, top.keyNext, isKey = t, false, true
			}
		}
		if !isKey && top != nil && !top.obj {
			top.idx++
		}
		last = render()
		if end > off {
			return last
		}
		if d, ok := tok.(json.Delim); ok {
			stack = append(stack, &frame{obj: d == '{', keyNext: d == '{', idx: -1})
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
