// Package proctest answers tests that check a child process is gone.
//
// Only tests import it (app's TestImportRules lists it in no package's
// rule); it imports nothing of ours. It reads /proc, so it works on Linux.
package proctest

import (
	"fmt"
	"os"
	"strings"
)

// Alive reports whether process pid exists and is not a zombie (one whose
// parent died is reaped by init, maybe not at once).
func Alive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// The state follows the command name, which is in parentheses.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || i+2 >= len(s) || s[i+2] != 'Z'
}
