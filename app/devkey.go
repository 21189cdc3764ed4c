package app

import (
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// devKeyFile is flow dev's data-encryption key in its state folder.
const devKeyFile = "data-encryption.key"

// devDataKey returns the path of flow dev's data-encryption key in dir,
// creating it (32 random bytes, base64, mode 0600) on first use, so that
// what needs the key works out of the box under flow dev: webhook signing
// secrets (docs/notifications.md) and firmware credentials. A key set with
// FLOW_DATA_ENCRYPTION_KEY_PATH wins.
func devDataKey(dir string) (string, error) {
	path := filepath.Join(dir, devKeyFile)
	if _, err := os.Stat(path); err == nil {
		return path, nil
	} else if !errors.Is(err, fs.ErrNotExist) {
		return "", fmt.Errorf("flow dev data key: %w", err)
	}
	raw := make([]byte, 32)
	if _, err := rand.Read(raw); err != nil {
		return "", err
	}
	if err := os.WriteFile(path, []byte(base64.StdEncoding.EncodeToString(raw)+"\n"), 0o600); err != nil {
		return "", fmt.Errorf("flow dev data key: %w", err)
	}
	return path, nil
}
