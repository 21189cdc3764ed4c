package isolation

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/nicoflow/flow/db"
	"github.com/nicoflow/flow/inventory"
	"github.com/nicoflow/flow/operations/isolation/internal/dbsqlc"
)

// ReportInput is a leak the BMS reports (the critical tier): on a coolant
// loop, or on a rack (exactly one).
type ReportInput struct {
	Loop    string
	Rack    *inventory.RackRef
	Summary string
	By      string // the reporting identity
}

// maxLoop bounds a loop name (bytes).
const maxLoop = 128

// Report records a BMS leak report through tx and answers it as a severe
// leak on every rack of the loop (a rack's report: every rack of its loop,
// or the rack alone when its loop is not known): each rack not isolated
// yet is powered off and the facility is asked to isolate it. It returns
// the report with the racks isolated for it. Bad input is a *FieldError
// (loop, rack, summary); an unknown rack inventory.ErrRackNotFound, an
// unknown loop ErrUnknownLoop; nothing is written then.
func (s *Service) Report(ctx context.Context, tx pgx.Tx, in ReportInput) (Report, error) {
	loop := strings.TrimSpace(in.Loop)
	summary, err := checkText("summary", in.Summary, false)
	if err != nil {
		return Report{}, err
	}
	switch {
	case loop == "" && in.Rack == nil:
		return Report{}, invalid("loop", "name the coolant loop (or the rack) the BMS sees leaking")
	case loop != "" && in.Rack != nil:
		return Report{}, invalid("rack", "give the coolant loop or the rack, not both")
	case len(loop) > maxLoop:
		return Report{}, invalid("loop", "must be at most %d bytes, got %d", maxLoop, len(loop))
	}
	var racks []uuid.UUID
	var rackID *uuid.UUID
	if in.Rack != nil {
		r, err := s.cfg.Inv.ResolveRack(ctx, tx, *in.Rack)
		if err != nil {
			return Report{}, err
		}
		rackID = &r.ID
		p, err := s.placement(ctx, tx, r.ID)
		if err != nil {
			return Report{}, err
		}
		racks = []uuid.UUID{r.ID}
		if p.Loop != "" && s.cfg.LoopRacks != nil {
			if racks, err = s.cfg.LoopRacks(ctx, tx, p.Loop); err != nil {
				return Report{}, err
			}
			loop = p.Loop
		}
	} else {
		if s.cfg.LoopRacks != nil {
			if racks, err = s.cfg.LoopRacks(ctx, tx, loop); err != nil {
				return Report{}, err
			}
		}
		if len(racks) == 0 {
			return Report{}, fmt.Errorf("%w: no rack is on coolant loop %q (set it with `flow rack set RACK --loop %s`)", ErrUnknownLoop, loop, loop)
		}
	}
	id := uuid.New()
	reason := "the BMS reports a coolant leak on loop " + loop
	if loop == "" {
		reason = "the BMS reports a coolant leak on the rack"
	}
	if summary != "" {
		reason += ": " + summary
	}
	var isolated []uuid.UUID
	now := time.Now()
	for _, r := range racks {
		_, ok, err := s.isolate(ctx, tx, r, TierCritical, reason, nil, &id, now)
		if err != nil {
			return Report{}, fmt.Errorf("isolate rack %s: %w", r, err)
		}
		if ok {
			isolated = append(isolated, r)
		}
	}
	if isolated == nil {
		isolated = []uuid.UUID{}
	}
	var loopp *string
	if loop != "" {
		loopp = &loop
	}
	row, err := s.q.ReportInsert(ctx, tx, dbsqlc.ReportInsertParams{ID: id, ReportedBy: in.By, CoolantLoop: loopp, RackID: rackID, Summary: summary, RackIDs: isolated})
	if err != nil {
		return Report{}, fmt.Errorf("insert report: %w", err)
	}
	return reportFromRow(row), nil
}

// Reports returns the BMS's reports, newest first: those of by only when
// it is not "" (at most limit; 0: 100).
func (s *Service) Reports(ctx context.Context, dbtx db.DBTX, by string, limit int) ([]Report, error) {
	if limit <= 0 || limit > 1000 {
		limit = 100
	}
	rows, err := s.q.ReportList(ctx, dbtx, dbsqlc.ReportListParams{ReportedBy: by, Lim: int32(limit)})
	if err != nil {
		return nil, fmt.Errorf("list reports: %w", err)
	}
	out := make([]Report, len(rows))
	for i, r := range rows {
		out[i] = reportFromRow(r)
	}
	return out, nil
}
