package sentinel

import (
	"strings"
	"testing"
)

// The grant a release's wake-up carries is written twice: in Go for the
// coalescer's set statement (grantWakeSQL, in sqlReleaseSet) and in
// migration 14 for a lone release (lease_release_to, migration 11's
// lease_release with the waiter's channel). A waiter that cannot
// parse it falls back to reading its grant, a statement no test of the
// set path would notice, so the two must stay the same expression.
func TestGrantWakeFormatsAgree(t *testing.T) {
	squash := func(s string) string { return strings.Join(strings.Fields(s), "") }
	var mig string
	for _, m := range Migrations("s") {
		if m.Version == 14 {
			mig = m.SQL
		}
	}
	if mig == "" {
		t.Fatal("migration 14 not found")
	}
	if !strings.Contains(squash(mig), squash(grantWakeSQL)) {
		t.Fatalf("lease_release_to's grant wake-up differs from grantWakeSQL:\n%s", grantWakeSQL)
	}
	if !strings.Contains(squash(sqlReleaseSet), squash(grantWakeSQL)) {
		t.Fatal("sqlReleaseSet no longer writes grantWakeSQL")
	}
}
