package inventory

import (
	"fmt"
	"net/netip"
	"strings"

	flowv1 "github.com/nicoflow/flow/proto/gen/v1"
)

// Edge validation: one function per wire message kind, run while a request
// is converted (handler_fromproto.go), before any service call. Sizes, NUL
// bytes and UTF-8 of every string are the app's request limits (checked
// before the handler runs); here are the rules of each kind: names trimmed
// and not blank, descriptions JSON, positions in range, IPs and MACs
// parsed. Errors are *FieldError naming the field.

// MaxPosition is the largest slot_id, tray_idx or host_id a component may
// have; positions are never negative.
const MaxPosition = 65535

// deviceInfo is a DeviceInfo checked and cleaned: names, manufacturer,
// model and serial trimmed; Model and Description keep their presence.
type deviceInfo struct {
	Name, Manufacturer, SerialNumber string
	Model, Description               *string
}

// deviceInfoFromProto checks info (nil reads as empty): a name,
// manufacturer, model or serial that is set must not be blank (only
// whitespace). Values are trimmed of surrounding whitespace; a description
// is kept as given (plain text or a JSON document, as upstream takes it;
// its size is bounded at the edge).
func deviceInfoFromProto(info *flowv1.DeviceInfo, field string) (deviceInfo, error) {
	var out deviceInfo
	var err error
	if out.Name, err = trimmed(info.GetName(), field+".name"); err != nil {
		return out, err
	}
	if out.Manufacturer, err = trimmed(info.GetManufacturer(), field+".manufacturer"); err != nil {
		return out, err
	}
	if out.SerialNumber, err = trimmed(info.GetSerialNumber(), field+".serial_number"); err != nil {
		return out, err
	}
	if info != nil && info.Model != nil {
		m, err := trimmed(*info.Model, field+".model")
		if err != nil {
			return out, err
		}
		out.Model = &m
	}
	if info != nil && info.Description != nil {
		d := *info.Description
		out.Description = &d
	}
	return out, nil
}

// trimmed returns s without surrounding whitespace; a non-empty s of only
// whitespace is an error.
func trimmed(s, field string) (string, error) {
	t := strings.TrimSpace(s)
	if t == "" && s != "" {
		return "", invalid(field, "must not be blank (only whitespace)")
	}
	return t, nil
}

// positionFromProto checks that every coordinate is within 0…MaxPosition.
func positionFromProto(p *flowv1.RackPosition, field string) (Position, error) {
	out := Position{SlotID: p.GetSlotId(), TrayIdx: p.GetTrayIdx(), HostID: p.GetHostId()}
	for _, c := range []struct {
		name string
		v    int32
	}{{"slot_id", out.SlotID}, {"tray_idx", out.TrayIdx}, {"host_id", out.HostID}} {
		if c.v < 0 || c.v > MaxPosition {
			return Position{}, invalid(field+"."+c.name, "must be within 0…%d, got %d", MaxPosition, c.v)
		}
	}
	return out, nil
}

// ipFromProto parses an optional BMC IP address: one IPv4 or IPv6 address,
// no prefix length, no zone; it returns the address in canonical form.
func ipFromProto(ip *string, field string) (*string, error) {
	if ip == nil || *ip == "" {
		return ip, nil
	}
	addr, err := netip.ParseAddr(strings.TrimSpace(*ip))
	if err != nil || addr.Zone() != "" {
		return nil, invalid(field, "must be an IPv4 or IPv6 address such as 10.0.0.1 (no prefix length or zone), got %q", clip(*ip))
	}
	s := addr.Unmap().String()
	return &s, nil
}

// clip bounds a user value quoted in an error message.
func clip(s string) string {
	const max = 64
	if len(s) <= max {
		return s
	}
	cut := max
	for cut > 0 && s[cut]&0xC0 == 0x80 {
		cut--
	}
	return fmt.Sprintf("%s…(%d bytes)", s[:cut], len(s))
}
