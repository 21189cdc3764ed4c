package inventory

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/nicoflow/flow/db"
	"github.com/nicoflow/flow/inventory/internal/dbsqlc"
)

// CreateNVLDomain creates a named NVLink domain (with d.ID when set, and
// d.ExternalID and d.NMXCClusterID when given) and returns its UUID. As
// upstream does, creating a domain whose ID or name already exists is not an
// error: the existing domain's UUID is returned. It writes only through tx.
// Errors: *FieldError for an empty name, ErrNVLDomainExists when another
// domain holds the external ID.
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
	if err := s.q.NVLDomainInsert(ctx, tx, dbsqlc.NVLDomainInsertParams{
		ID: d.ID, Name: &d.Name, ExternalID: nonEmpty(d.ExternalID), NmxcClusterID: d.NMXCClusterID,
	}); db.IsUniqueViolation(err, "nvl_domain_external_id_key") {
		return uuid.Nil, fmt.Errorf("%w: external id %q", ErrNVLDomainExists, d.ExternalID)
	} else if err != nil {
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
	case ref.ExternalID != "":
		row, err = s.q.NVLDomainGetByExternalID(ctx, dbtx, &ref.ExternalID)
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
	return NVLDomain{ID: r.ID, Name: deref(r.Name), ExternalID: deref(r.ExternalID), NMXCClusterID: r.NmxcClusterID}
}

// NVLinkDomain returns the live domain whose external ID is exactly
// externalID, with its live member racks (by UUID) and, when
// withComponents, their components. Errors: *FieldError for a blank ID,
// ErrNVLDomainNotFound.
func (s *Service) NVLinkDomain(ctx context.Context, dbtx db.DBTX, externalID string, withComponents bool) (NVLinkDomain, error) {
	if strings.TrimSpace(externalID) == "" {
		return NVLinkDomain{}, invalid("id", "must not be blank")
	}
	row, err := s.q.NVLDomainGetByExternalID(ctx, dbtx, &externalID)
	if errors.Is(err, pgx.ErrNoRows) {
		return NVLinkDomain{}, fmt.Errorf("%w: external id %q", ErrNVLDomainNotFound, externalID)
	} else if err != nil {
		return NVLinkDomain{}, fmt.Errorf("get nvl domain: %w", err)
	}
	out, err := s.withMembers(ctx, dbtx, []NVLDomain{domainFromRow(row)}, withComponents)
	if err != nil {
		return NVLinkDomain{}, err
	}
	return out[0], nil
}

// NVLinkDomainOrder is GetListOfNVLinkDomains' order_by: "" or "NAME_ASC"
// (name ascending, the default) or "NAME_DESC".
type NVLinkDomainOrder string

// ListNVLinkDomains returns one page of the live domains that have an
// external ID, filtered by an optional name query (nil: all), ordered by
// name (unnamed domains last when ascending) then UUID, with their members
// as NVLinkDomain returns them, and the number of matches before paging.
// Errors: *FieldError for a bad order or paging.
func (s *Service) ListNVLinkDomains(ctx context.Context, dbtx db.DBTX, q *StringQuery, order NVLinkDomainOrder, page Page, withComponents bool) ([]NVLinkDomain, int32, error) {
	var desc bool
	switch order {
	case "", "NAME_ASC":
	case "NAME_DESC":
		desc = true
	default:
		return nil, 0, invalid("order_by", "unknown order %q: give NAME_ASC or NAME_DESC", string(order))
	}
	limit, err := pageLimit(page, DefaultPageLimit)
	if err != nil {
		return nil, 0, err
	}
	patterns, anyOf := likePatterns(q)
	rows, err := s.q.NVLinkDomainList(ctx, dbtx, dbsqlc.NVLinkDomainListParams{
		NamePatterns: patterns, NameAny: anyOf, OrderDesc: desc, RowOffset: page.Offset, RowLimit: limit,
	})
	if err != nil {
		return nil, 0, fmt.Errorf("list nvlink domains: %w", err)
	}
	total, err := s.q.NVLinkDomainCount(ctx, dbtx, dbsqlc.NVLinkDomainCountParams{NamePatterns: patterns, NameAny: anyOf})
	if err != nil {
		return nil, 0, fmt.Errorf("count nvlink domains: %w", err)
	}
	domains := make([]NVLDomain, len(rows))
	for i, r := range rows {
		domains[i] = domainFromRow(r)
	}
	out, err := s.withMembers(ctx, dbtx, domains, withComponents)
	if err != nil {
		return nil, 0, err
	}
	return out, int32(total), nil
}

// withMembers loads the live racks of domains in one query (and their
// components in the racks' usual few), each domain's by rack UUID.
func (s *Service) withMembers(ctx context.Context, dbtx db.DBTX, domains []NVLDomain, withComponents bool) ([]NVLinkDomain, error) {
	out := make([]NVLinkDomain, len(domains))
	ids := make([]uuid.UUID, len(domains))
	index := make(map[uuid.UUID]int, len(domains))
	for i, d := range domains {
		out[i].NVLDomain = d
		ids[i] = d.ID
		index[d.ID] = i
	}
	if len(domains) == 0 {
		return out, nil
	}
	rows, err := s.q.RackListByNVLDomains(ctx, dbtx, ids)
	if err != nil {
		return nil, fmt.Errorf("list racks of nvl domains: %w", err)
	}
	racks, err := s.completeRacks(ctx, dbtx, rows, withComponents)
	if err != nil {
		return nil, err
	}
	for _, r := range racks {
		i := index[*r.NVLDomainID]
		out[i].Racks = append(out[i].Racks, r)
	}
	return out, nil
}
