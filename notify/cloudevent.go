package notify

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// CloudEvent is a CloudEvents 1.0 event in its structured JSON form
// (https://github.com/cloudevents/spec/blob/v1.0.2/cloudevents/formats/json-format.md),
// the body of every webhook request. Flow writes only these attributes;
// the SDK (github.com/cloudevents/sdk-go/v2) would add 7 MB and 29
// packages (zap, json-iterator) to the binary for the same eight fields.
type CloudEvent struct {
	SpecVersion     string          `json:"specversion"`
	ID              string          `json:"id"`
	Source          string          `json:"source"`
	Type            string          `json:"type"`
	Subject         string          `json:"subject,omitempty"`
	Time            time.Time       `json:"time"`
	DataContentType string          `json:"datacontenttype"`
	Data            json.RawMessage `json:"data"`
}

// ContentType is the media type of a structured CloudEvent.
const ContentType = "application/cloudevents+json"

// BatchContentType is the media type of a CloudEvents JSON batch (a JSON
// array of structured CloudEvents), the body of a batched subscription's
// requests.
const BatchContentType = "application/cloudevents-batch+json"

// SignatureHeader carries a webhook request's signature:
// "t=<unix seconds>,v1=<hex HMAC-SHA256 of "<t>.<body>" under the secret>".
const SignatureHeader = "Flow-Signature"

// ReplayWindow is how old a signature's timestamp a receiver should
// accept (docs/notifications.md): Flow signs each attempt afresh.
const ReplayWindow = 5 * time.Minute

// Sign returns the SignatureHeader value of body sent at t under secret.
func Sign(secret []byte, t time.Time, body []byte) string {
	ts := strconv.FormatInt(t.Unix(), 10)
	return "t=" + ts + ",v1=" + hex.EncodeToString(mac(secret, ts, body))
}

func mac(secret []byte, ts string, body []byte) []byte {
	m := hmac.New(sha256.New, secret)
	m.Write([]byte(ts))
	m.Write([]byte("."))
	m.Write(body)
	return m.Sum(nil)
}

// ErrBadSignature: a signature that does not verify.
var ErrBadSignature = errors.New("notify: bad signature")

// Verify checks a SignatureHeader value against body and secret, as a
// receiver does: the HMAC must match and the timestamp be within window
// of now. It is the reference for receivers (docs/notifications.md).
func Verify(secret []byte, header string, body []byte, now time.Time, window time.Duration) error {
	var ts string
	var sigs [][]byte
	for _, part := range strings.Split(header, ",") {
		k, v, _ := strings.Cut(strings.TrimSpace(part), "=")
		switch k {
		case "t":
			ts = v
		case "v1":
			if b, err := hex.DecodeString(v); err == nil {
				sigs = append(sigs, b)
			}
		}
	}
	sec, err := strconv.ParseInt(ts, 10, 64)
	if err != nil || len(sigs) == 0 {
		return fmt.Errorf("%w: want t=<unix>,v1=<hex>", ErrBadSignature)
	}
	if d := now.Sub(time.Unix(sec, 0)); d > window || d < -window {
		return fmt.Errorf("%w: timestamp %s is outside the replay window", ErrBadSignature, time.Unix(sec, 0).UTC().Format(time.RFC3339))
	}
	want := mac(secret, ts, body)
	for _, s := range sigs {
		if hmac.Equal(s, want) {
			return nil
		}
	}
	return fmt.Errorf("%w: HMAC mismatch", ErrBadSignature)
}
