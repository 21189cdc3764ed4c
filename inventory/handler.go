package inventory

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"

	"connectrpc.com/connect"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	flowv1 "github.com/nicoflow/flow/proto/gen/v1"
)

// The handler is split like the service: this file holds the racks'
// methods and the error mapping, handler_components.go and
// handler_nvldomains.go the other methods, handler_fromproto.go and
// handler_toproto.go the wire conversions, handler_admin.go the inventory
// methods of Flow's own admin service.

// Handler serves the inventory methods of v1.Flow: rack and component CRUD
// and NVLink domains. app embeds it in the one v1.Flow handler.
type Handler struct {
	svc  *Service
	pool *pgxpool.Pool
	// builds bounds the listing pages built at once (nil: no bound), and
	// cache keeps built rack pages (nil: off); see SetListings.
	builds chan struct{}
	cache  *pageCache
	// checkPool runs the cached pages' checks (ListingOptions.CheckPool).
	checkPool *pgxpool.Pool
	// gen reads the inventory generation for the cached listings, shared
	// among the calls waiting for one (freshRead).
	gen freshRead[int64]
	// hits and misses count the rack pages answered from the cache and
	// built for it; genReads and pageChecks the generation reads and the
	// checks of a page's task-derived fields run for them (shared among
	// concurrent calls, so fewer than the calls).
	hits, misses         atomic.Int64
	genReads, pageChecks atomic.Int64
	// jsonEncodes counts the cached pages encoded as JSON (once a page).
	jsonEncodes atomic.Int64
	// pageBuilds shares a page's build among the calls that need it at once.
	pageBuilds pageBuilds
}

// NewHandler returns a Handler running svc on pool.
func NewHandler(svc *Service, pool *pgxpool.Pool) *Handler {
	return &Handler{svc: svc, pool: pool, checkPool: pool}
}

// connectError maps the package's errors to Connect codes. Errors it does
// not know pass through; the app interceptor answers those as internal.
func connectError(err error) error {
	switch {
	case errors.Is(err, ErrInvalidArgument):
		return connect.NewError(connect.CodeInvalidArgument, err)
	case errors.Is(err, ErrRackNotFound), errors.Is(err, ErrComponentNotFound), errors.Is(err, ErrNVLDomainNotFound):
		return connect.NewError(connect.CodeNotFound, err)
	case errors.Is(err, ErrRackExists), errors.Is(err, ErrComponentExists), errors.Is(err, ErrBMCExists), errors.Is(err, ErrRackInOtherDomain),
		errors.Is(err, ErrNVLDomainExists):
		return connect.NewError(connect.CodeAlreadyExists, err)
	case errors.Is(err, ErrNotDeleted), errors.Is(err, ErrAmbiguous), errors.Is(err, ErrNoRack):
		return connect.NewError(connect.CodeFailedPrecondition, err)
	case errors.Is(err, ErrRackFull):
		return connect.NewError(connect.CodeResourceExhausted, err)
	}
	return err
}

func (h *Handler) inTx(ctx context.Context, fn func(tx pgx.Tx) error) error {
	return pgx.BeginFunc(ctx, h.pool, fn)
}

// CreateExpectedRack implements v1.Flow.
func (h *Handler) CreateExpectedRack(ctx context.Context, req *flowv1.CreateExpectedRackRequest) (*flowv1.CreateExpectedRackResponse, error) {
	if req.GetRack() == nil {
		return nil, connectError(invalid("rack", "required"))
	}
	if req.GetRack().GetInfo() == nil {
		return nil, connectError(invalid("rack.info", "required (serial_number and manufacturer identify the rack)"))
	}
	rack, err := rackFromProto(req.GetRack(), "rack")
	if err != nil {
		return nil, connectError(err)
	}
	var id uuid.UUID
	err = h.inTx(ctx, func(tx pgx.Tx) (err error) {
		id, err = h.svc.CreateRack(ctx, tx, rack)
		return err
	})
	if err != nil {
		return nil, connectError(err)
	}
	return &flowv1.CreateExpectedRackResponse{Id: uuidProto(id)}, nil
}

// GetRackInfoByID implements v1.Flow.
func (h *Handler) GetRackInfoByID(ctx context.Context, req *flowv1.GetRackInfoByIDRequest) (*flowv1.GetRackInfoResponse, error) {
	id, err := parseUUID(req.GetId(), "id")
	if err != nil {
		return nil, connectError(err)
	}
	rack, err := h.svc.Rack(ctx, h.pool, id, req.GetWithComponents())
	if err != nil {
		return nil, connectError(err)
	}
	return &flowv1.GetRackInfoResponse{Rack: rackToProto(rack)}, nil
}

// GetRackInfoBySerial implements v1.Flow.
func (h *Handler) GetRackInfoBySerial(ctx context.Context, req *flowv1.GetRackInfoBySerialRequest) (*flowv1.GetRackInfoResponse, error) {
	si := req.GetSerialInfo()
	rack, err := h.svc.RackBySerial(ctx, h.pool, si.GetManufacturer(), si.GetSerialNumber(), req.GetWithComponents())
	if err != nil {
		return nil, connectError(err)
	}
	return &flowv1.GetRackInfoResponse{Rack: rackToProto(rack)}, nil
}

// GetListOfRacks implements v1.Flow.
func (h *Handler) GetListOfRacks(ctx context.Context, req *flowv1.GetListOfRacksRequest) (*flowv1.GetListOfRacksResponse, error) {
	q := RackQuery{WithComponents: req.GetWithComponents(), Page: pageFromProto(req.GetPagination()), WithExternalIDOnly: req.GetWithExternalIdOnly()}
	for i, f := range req.GetFilters() {
		field := fmt.Sprintf("filters[%d]", i)
		rf, ok := f.GetField().(*flowv1.Filter_RackField)
		if !ok {
			return nil, connectError(invalid(field+".rack_field", "required (rack listings take rack filters)"))
		}
		var dst **StringQuery
		switch rf.RackField {
		case flowv1.RackFilterField_RACK_FILTER_FIELD_NAME:
			dst = &q.Name
		case flowv1.RackFilterField_RACK_FILTER_FIELD_MANUFACTURER:
			dst = &q.Manufacturer
		case flowv1.RackFilterField_RACK_FILTER_FIELD_MODEL:
			dst = &q.Model
		default:
			return nil, connectError(invalid(field+".rack_field", "unknown value %d", rf.RackField))
		}
		if *dst != nil {
			return nil, connectError(invalid(field+".rack_field", "%s given twice; put the patterns in one filter", rf.RackField))
		}
		*dst = stringQueryFromProto(f.GetQueryInfo())
	}
	if ob := req.GetOrderBy(); ob != nil {
		desc, err := directionFromProto(ob.GetDirection())
		if err != nil {
			return nil, connectError(err)
		}
		q.Order.Desc = desc
		if _, isComp := ob.GetField().(*flowv1.OrderBy_ComponentField); isComp {
			return nil, connectError(invalid("order_by.rack_field", "required (rack listings order by rack fields)"))
		}
		switch ob.GetRackField() {
		case flowv1.RackOrderByField_RACK_ORDER_BY_FIELD_UNSPECIFIED, flowv1.RackOrderByField_RACK_ORDER_BY_FIELD_NAME:
			q.Order.Key = "name"
		case flowv1.RackOrderByField_RACK_ORDER_BY_FIELD_MANUFACTURER:
			q.Order.Key = "manufacturer"
		case flowv1.RackOrderByField_RACK_ORDER_BY_FIELD_MODEL:
			q.Order.Key = "model"
		default:
			return nil, connectError(invalid("order_by.rack_field", "unknown value %d", ob.GetRackField()))
		}
	}
	enc := callEncoding(ctx)
	if h.cache == nil || enc == encodingOther {
		racks, total, release, err := h.buildRacks(ctx, q)
		if err != nil {
			return nil, err
		}
		defer release()
		return racksResponse(racks, total), nil
	}
	return h.cachedRackPage(ctx, req, q, enc == encodingJSON)
}

// buildRacks lists a rack page from the database once a build slot is
// free; the caller holds the slot until it is done with the page (release).
func (h *Handler) buildRacks(ctx context.Context, q RackQuery) ([]Rack, int32, func(), error) {
	release, err := h.acquireBuild(ctx)
	if err != nil {
		return nil, 0, nil, err
	}
	racks, total, err := h.svc.ListRacks(ctx, h.pool, q)
	if err != nil {
		release()
		return nil, 0, nil, connectError(err)
	}
	return racks, total, release, nil
}

func racksResponse(racks []Rack, total int32) *flowv1.GetListOfRacksResponse {
	out := &flowv1.GetListOfRacksResponse{Racks: make([]*flowv1.Rack, len(racks)), Total: total}
	for i, r := range racks {
		out.Racks[i] = rackToProto(r)
	}
	return out
}

// cachedRackPage answers a valid rack listing from the page cache when the
// page still holds (pagecache.go), and otherwise builds it, under a build
// slot, and keeps it. The answer carries the marshaled page as the unknown
// fields of an empty message, which protobuf marshals as they are: the
// client receives exactly the page's bytes. A JSON call (asJSON) gets the
// page's JSON, encoded once per cached page (cachedPage.jsonPage), as the
// one unknown field JSONPageField that the server's JSON codec writes as
// it is (edge: jsonCodec).
func (h *Handler) cachedRackPage(ctx context.Context, req *flowv1.GetListOfRacksRequest, q RackQuery, asJSON bool) (*flowv1.GetListOfRacksResponse, error) {
	k, err := proto.MarshalOptions{Deterministic: true}.Marshal(req)
	if err != nil {
		return nil, err
	}
	key := string(k)
	// The generation is read before anything of the page: see pagecache.go.
	// Both checks are shared with the calls that wait for the same ones,
	// never answered by a read that started before this call (freshRead).
	gen, err := h.gen.do(ctx, func(ctx context.Context) (int64, error) {
		h.genReads.Add(1)
		gen, err := h.svc.q.InventoryGeneration(ctx, h.pool)
		if err != nil {
			return 0, fmt.Errorf("inventory generation: %w", err)
		}
		return gen, nil
	})
	if err != nil {
		return nil, err
	}
	// A call that finds a build of its page in flight waits for it and
	// looks again (pageBuilds): a stale or cold page is built once, not
	// once a reader. After waitsForBuild waits it builds the page itself.
	const waitsForBuild = 2
	for waits := 0; ; waits++ {
		if p := h.cache.get(key, gen); p != nil {
			dyn, err := p.check.do(ctx, func(ctx context.Context) (uint64, error) {
				h.pageChecks.Add(1)
				return h.svc.currentFingerprint(ctx, h.checkPool, p.ids, p.racks)
			})
			if err != nil {
				return nil, err
			}
			if dyn == p.dyn {
				h.hits.Add(1)
				return h.answerPage(p, asJSON)
			}
		}
		build := func() (*cachedPage, error) {
			racks, total, release, err := h.buildRacks(ctx, q)
			if err != nil {
				return nil, err
			}
			defer release()
			b, err := proto.Marshal(racksResponse(racks, total))
			if err != nil {
				return nil, err
			}
			h.misses.Add(1)
			ids, dyn := pageFingerprint(racks)
			p := &cachedPage{key: key, gen: gen, ids: ids, racks: len(racks), dyn: dyn, bytes: b}
			h.cache.put(p)
			return p, nil
		}
		if waits >= waitsForBuild {
			p, err := build()
			if err != nil {
				return nil, err
			}
			return h.answerPage(p, asJSON)
		}
		p, built, err := h.pageBuilds.do(ctx, key, build)
		if err != nil {
			return nil, err
		}
		if built {
			return h.answerPage(p, asJSON)
		}
	}
}

// answerPage is the answer carrying cached page p: its protobuf bytes, or
// (asJSON) its JSON.
func (h *Handler) answerPage(p *cachedPage, asJSON bool) (*flowv1.GetListOfRacksResponse, error) {
	if !asJSON {
		return rawRacksResponse(p.bytes), nil
	}
	framed, err := p.jsonPage(h.cache, &h.jsonEncodes)
	if err != nil {
		return nil, err
	}
	return rawRacksResponse(framed), nil
}

// rawRacksResponse is a GetListOfRacksResponse that marshals to b.
func rawRacksResponse(b []byte) *flowv1.GetListOfRacksResponse {
	out := &flowv1.GetListOfRacksResponse{}
	out.ProtoReflect().SetUnknown(protoreflect.RawFields(b))
	return out
}

// PatchRack implements v1.Flow.
func (h *Handler) PatchRack(ctx context.Context, req *flowv1.PatchRackRequest) (*flowv1.PatchRackResponse, error) {
	pr := req.GetRack()
	if pr == nil {
		return nil, connectError(invalid("rack", "required"))
	}
	di, err := deviceInfoFromProto(pr.GetInfo(), "rack.info")
	if err != nil {
		return nil, connectError(err)
	}
	p := RackPatch{
		Name:         di.Name,
		Manufacturer: di.Manufacturer,
		SerialNumber: di.SerialNumber,
		Model:        di.Model,
		Description:  di.Description,
		ExternalID:   strings.TrimSpace(pr.GetExternalId()),
	}
	if pr.GetInfo().GetId() != nil {
		id, err := parseUUID(pr.GetInfo().GetId(), "rack.info.id")
		if err != nil {
			return nil, connectError(err)
		}
		p.ID = id
	}
	if l := pr.GetLocation(); l != nil {
		p.Location = Location{Region: l.GetRegion(), Datacenter: l.GetDatacenter(), Room: l.GetRoom(), Position: l.GetPosition()}
	}
	for i, pc := range pr.GetComponents() {
		c, err := componentFromProto(pc, fmt.Sprintf("rack.components[%d]", i), true)
		if err != nil {
			return nil, connectError(err)
		}
		p.Components = append(p.Components, c)
	}
	var report string
	err = h.inTx(ctx, func(tx pgx.Tx) (err error) {
		report, err = h.svc.PatchRack(ctx, tx, p)
		return err
	})
	if err != nil {
		return nil, connectError(err)
	}
	return &flowv1.PatchRackResponse{Report: report}, nil
}

// DeleteRack implements v1.Flow.
func (h *Handler) DeleteRack(ctx context.Context, req *flowv1.DeleteRackRequest) (*flowv1.DeleteRackResponse, error) {
	id, err := parseUUID(req.GetId(), "id")
	if err != nil {
		return nil, connectError(err)
	}
	if err := h.inTx(ctx, func(tx pgx.Tx) error { return h.svc.DeleteRack(ctx, tx, id) }); err != nil {
		return nil, connectError(err)
	}
	return &flowv1.DeleteRackResponse{}, nil
}

// PurgeRack implements v1.Flow.
func (h *Handler) PurgeRack(ctx context.Context, req *flowv1.PurgeRackRequest) (*flowv1.PurgeRackResponse, error) {
	id, err := parseUUID(req.GetId(), "id")
	if err != nil {
		return nil, connectError(err)
	}
	if err := h.inTx(ctx, func(tx pgx.Tx) error { return h.svc.PurgeRack(ctx, tx, id) }); err != nil {
		return nil, connectError(err)
	}
	return &flowv1.PurgeRackResponse{}, nil
}
