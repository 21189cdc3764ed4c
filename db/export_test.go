package db

import (
	"github.com/golang-migrate/migrate/v4"
	"github.com/jackc/pgx/v5/pgtype"
)

// NewMigrator opens golang-migrate on databaseURL with Flow's migrations,
// for tests that step through versions.
func NewMigrator(databaseURL string) (*migrate.Migrate, error) { return newMigrator(databaseURL) }

// UUIDArrayElementCodec returns the element codec of Flow's uuid[] codec.
func UUIDArrayElementCodec(c pgtype.Codec) pgtype.Codec { return c.(uuidArrayCodec).ElementType.Codec }
