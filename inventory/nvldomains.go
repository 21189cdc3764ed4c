package inventory

import (
	"context"
	"errors"
	"fmt"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/nicoflow/flow/db"
	"github.com/nicoflow/flow/inventory/internal/dbsqlc"
)

// CreateNVLDomain creates a named NVLink domain (with d.ID when set) and
// returns its UUID. As upstream does, creating a domain whose ID or name
// already exists is not an error: the existing domain's UUID is returned.
// It writes only through tx. Errors: *FieldError for an empty name.
func (s *Service) CreateNVLDomain(ctx context.Context, tx pgx.Tx, d NVLDomain) (uuid.UUID, error) {
	if d.Name == "" {
		return uuid.Nil, invalid("nvl_domain.identifier.name", "must not be empty")
	}
	if d.ID != uuid.Nil {
		if cur, err := s.q.NVLDomainGetByID(ctx, tx, d.ID); err == nil {
			return cur.ID, nil
		} else if !errors.Is(err, pgx.ErrNoRows) {
			return uuid.Nil, fmt.Errorf("get nvl domain: %w", err)
		}
	}
	if cur, err := s.q.NVLDomainGetByName(ctx, tx, &d.Name); err == nil {
		return cur.ID, nil
	} else if !errors.Is(err, pgx.ErrNoRows) {
		return uuid.Nil, fmt.Errorf("get nvl domain: %w", err)
	}
	if d.ID == uuid.Nil {
		d.ID = uuid.New()
	}
	if err := s.q.NVLDomainInsert(ctx, tx, dbsqlc.NVLDomainInsertParams{ID: d.ID, Name: &d.Name}); err != nil {
		return uuid.Nil, fmt.Errorf("insert nvl domain: %w", err)
	}
	return d.ID, nil
}

// NVLDomain returns the domain identified by ref (UUID wins over name).
// Errors: *FieldError for an empty ref, ErrNVLDomainNotFound.
func (s *Service) NVLDomain(ctx context.Context, dbtx db.DBTX, ref NVLDomainRef) (NVLDomain, error) {
	var row dbsqlc.NVLDomain
	var err error
	switch {
	case ref.ID != uuid.Nil:
		row, err = s.q.NVLDomainGetByID(ctx, dbtx, ref.ID)
	case ref.Name != "":
		row, err = s.q.NVLDomainGetByName(ctx, dbtx, &ref.Name)
	default:
		return NVLDomain{}, invalid("nvl_domain_identifier", "give id or name")
	}
	if errors.Is(err, pgx.ErrNoRows) {
		return NVLDomain{}, fmt.Errorf("%w: %s", ErrNVLDomainNotFound, ref)
	} else if err != nil {
		return NVLDomain{}, fmt.Errorf("get nvl domain: %w", err)
	}
	return domainFromRow(row), nil
}

// AttachRacks puts every listed rack into the domain, all or nothing. A rack
// already in this domain is left as is. It writes only through tx.
// Errors: *FieldError, ErrNVLDomainNotFound, the resolver's rack errors,
// ErrRackInOtherDomain.
func (s *Service) AttachRacks(ctx context.Context, tx pgx.Tx, domain NVLDomainRef, racks []RackRef) error {
	d, err := s.NVLDomain(ctx, tx, domain)
	if err != nil {
		return err
	}
	if len(racks) == 0 {
		return invalid("rack_identifiers", "must not be empty")
	}
	for i, ref := range racks {
		r, err := s.resolveRack(ctx, tx, ref, fmt.Sprintf("rack_identifiers[%d]", i))
		if err != nil {
			return err
		}
		if r.NVLDomainID != nil {
			if *r.NVLDomainID == d.ID {
				continue
			}
			return fmt.Errorf("%w: %s is in nvl domain %s", ErrRackInOtherDomain, ref, *r.NVLDomainID)
		}
		if err := s.q.RackSetNVLDomain(ctx, tx, dbsqlc.RackSetNVLDomainParams{ID: r.ID, NVLDomainID: &d.ID}); err != nil {
			return fmt.Errorf("attach rack %s: %w", r.ID, err)
		}
	}
	return nil
}

// DetachRacks takes every listed rack out of its NVLink domain, all or
// nothing; racks in no domain are left as they are (upstream instead stops
// silently at the first such rack). It writes only through tx.
// Errors: *FieldError and the resolver's rack errors.
func (s *Service) DetachRacks(ctx context.Context, tx pgx.Tx, racks []RackRef) error {
	if len(racks) == 0 {
		return invalid("rack_identifiers", "must not be empty")
	}
	for i, ref := range racks {
		r, err := s.resolveRack(ctx, tx, ref, fmt.Sprintf("rack_identifiers[%d]", i))
		if err != nil {
			return err
		}
		if r.NVLDomainID == nil {
			continue
		}
		if err := s.q.RackSetNVLDomain(ctx, tx, dbsqlc.RackSetNVLDomainParams{ID: r.ID}); err != nil {
			return fmt.Errorf("detach rack %s: %w", r.ID, err)
		}
	}
	return nil
}

// ListNVLDomains returns one page of domains whose names match q (nil:
// all), ordered by name then UUID, and the number of matches before paging.
// Errors: *FieldError for bad paging.
func (s *Service) ListNVLDomains(ctx context.Context, dbtx db.DBTX, q *StringQuery, page Page) ([]NVLDomain, int32, error) {
	limit, err := pageLimit(page, DefaultNVLDomainPageLimit)
	if err != nil {
		return nil, 0, err
	}
	patterns, anyOf := likePatterns(q)
	rows, err := s.q.NVLDomainList(ctx, dbtx, dbsqlc.NVLDomainListParams{NamePatterns: patterns, NameAny: anyOf, RowOffset: page.Offset, RowLimit: limit})
	if err != nil {
		return nil, 0, fmt.Errorf("list nvl domains: %w", err)
	}
	total, err := s.q.NVLDomainCount(ctx, dbtx, dbsqlc.NVLDomainCountParams{NamePatterns: patterns, NameAny: anyOf})
	if err != nil {
		return nil, 0, fmt.Errorf("count nvl domains: %w", err)
	}
	out := make([]NVLDomain, len(rows))
	for i, r := range rows {
		out[i] = domainFromRow(r)
	}
	return out, int32(total), nil
}

// RacksForNVLDomain returns the live racks in the domain, ordered by name
// then UUID. Errors: *FieldError, ErrNVLDomainNotFound.
func (s *Service) RacksForNVLDomain(ctx context.Context, dbtx db.DBTX, ref NVLDomainRef, withComponents bool) ([]Rack, error) {
	d, err := s.NVLDomain(ctx, dbtx, ref)
	if err != nil {
		return nil, err
	}
	rows, err := s.q.RackListByNVLDomain(ctx, dbtx, &d.ID)
	if err != nil {
		return nil, fmt.Errorf("list racks of nvl domain: %w", err)
	}
	return s.completeRacks(ctx, dbtx, rows, withComponents)
}

func domainFromRow(r dbsqlc.NVLDomain) NVLDomain {
	return NVLDomain{ID: r.ID, Name: deref(r.Name)}
}
