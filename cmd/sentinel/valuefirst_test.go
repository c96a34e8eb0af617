package main

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// force-complete and set-result refuse a VALUE that is not JSON with exit
// 2, as their help says, whether or not the database answers: the value
// is checked before the key's declared result type is read, so a database
// that is down does not turn a typo into exit 1.
func TestValueNotJSONIsRefusedBeforeTheDatabaseIsRead(t *testing.T) {
	down := []string{"DATABASE_URL=postgres://postgres@127.0.0.1:1/postgres?connect_timeout=2"}
	for _, sub := range []string{"force-complete", "set-result"} {
		r := runBin(t, down, nil, sub, "charge-1042", "pay_1042", "-n", "payments", "--token", "6", "--yes")
		requireCode(t, r, exitUsage)
		require.Contains(t, r.stderr, "VALUE must be a JSON document", sub)
		r = runBin(t, down, strings.NewReader("pay_1042\n"), sub, "charge-1042", "-n", "payments", "--token", "6", "--yes")
		requireCode(t, r, exitUsage)
		require.Contains(t, r.stderr, "VALUE must be a JSON document", sub)
	}
}
