package app

import (
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/nicoflow/flow/edge"
)

// The request limits (edge.Limits, docs/limits.md) are configuration: their
// FLOW_ settings and defaults live in ConfigVars (config.go) and are read
// here.

// DefaultLimits returns the limits with every setting at its default.
func DefaultLimits() edge.Limits {
	lim, errs := loadLimits(func(string) string { return "" })
	if len(errs) > 0 {
		panic("app: bad default limits: " + strings.Join(errs, "; "))
	}
	return lim
}

// loadLimits reads Limits from getenv; errs names every bad setting.
func loadLimits(getenv func(string) string) (edge.Limits, []string) {
	var lim edge.Limits
	var errs []string
	def := func(name string) string { return configDefault(getenv, name) }
	size := func(name string, dst *int) {
		n, err := strconv.Atoi(def(name))
		if err != nil || n < 1 {
			errs = append(errs, name+" must be a positive integer")
			return
		}
		*dst = n
	}
	dur := func(name string, dst *time.Duration) {
		d, err := time.ParseDuration(def(name))
		if err != nil || d <= 0 {
			errs = append(errs, name+" must be a positive duration such as 30s")
			return
		}
		*dst = d
	}
	size("FLOW_MAX_REQUEST_BYTES", &lim.RequestBytes)
	size("FLOW_MAX_REQUEST_BYTES_IN_FLIGHT", &lim.RequestBytesInFlight)
	size("FLOW_MAX_NAME_BYTES", &lim.NameBytes)
	size("FLOW_MAX_SERIAL_BYTES", &lim.SerialBytes)
	size("FLOW_MAX_MANUFACTURER_BYTES", &lim.ManufacturerBytes)
	size("FLOW_MAX_MAC_BYTES", &lim.MACBytes)
	size("FLOW_MAX_DESCRIPTION_BYTES", &lim.DescriptionBytes)
	size("FLOW_MAX_DOCUMENT_BYTES", &lim.DocumentBytes)
	size("FLOW_MAX_STRING_BYTES", &lim.StringBytes)
	size("FLOW_MAX_TARGETS", &lim.Targets)
	size("FLOW_MAX_COMPONENTS_PER_RACK", &lim.Components)
	size("FLOW_MAX_FILTER_PATTERNS", &lim.Patterns)
	size("FLOW_MAX_LIST_ITEMS", &lim.ListItems)
	size("FLOW_MAX_PAGE_SIZE", &lim.PageSize)
	size("FLOW_MAX_RACK_PAGE_WITH_COMPONENTS", &lim.RackComponentsPage)
	size("FLOW_MAX_CONCURRENT_LISTINGS", &lim.Listings)
	size("FLOW_MAX_CONCURRENT_LISTING_BUILDS", &lim.ListingBuilds)
	if d, err := time.ParseDuration(def("FLOW_LISTING_QUEUE_TIMEOUT")); err != nil || d < 0 {
		errs = append(errs, "FLOW_LISTING_QUEUE_TIMEOUT must be a duration such as 5s (0: wait until the call's deadline)")
	} else {
		lim.ListingQueueWait = d
	}
	if n, err := strconv.ParseInt(def("FLOW_LISTING_CACHE_BYTES"), 10, 64); err != nil || n < 0 {
		errs = append(errs, "FLOW_LISTING_CACHE_BYTES must be a non-negative integer (0: no cache)")
	} else {
		lim.ListingCacheBytes = n
	}
	if n, err := strconv.Atoi(def("FLOW_MAX_CONCURRENT_SUBMITS")); err != nil || n < 0 {
		errs = append(errs, "FLOW_MAX_CONCURRENT_SUBMITS must be a non-negative integer (0: one per CPU)")
	} else if n == 0 {
		lim.Submits = max(runtime.GOMAXPROCS(0), 2)
	} else {
		lim.Submits = n
	}
	dur("FLOW_READ_HEADER_TIMEOUT", &lim.ReadHeaderTimeout)
	dur("FLOW_READ_TIMEOUT", &lim.ReadTimeout)
	dur("FLOW_IDLE_TIMEOUT", &lim.IdleTimeout)
	if b, err := strconv.ParseBool(def("FLOW_STRICT_JSON")); err != nil {
		errs = append(errs, "FLOW_STRICT_JSON must be true or false")
	} else {
		lim.StrictJSON = b
	}
	return lim, errs
}

// limitsOrDefault returns lim, or DefaultLimits when lim is the zero value
// (tests that build a mux without a Config).
func limitsOrDefault(lim edge.Limits) edge.Limits {
	if lim.RequestBytes == 0 {
		return DefaultLimits()
	}
	return lim
}
