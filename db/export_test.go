package db

import "github.com/golang-migrate/migrate/v4"

// NewMigrator opens golang-migrate on databaseURL with Flow's migrations,
// for tests that step through versions.
func NewMigrator(databaseURL string) (*migrate.Migrate, error) { return newMigrator(databaseURL) }
