package sentinel

import (
	"strings"
	"testing"
)

// The grant a release's wake-up carries is written twice: in Go for the
// coalescer's set statement (grantWakeSQL, in sqlReleaseSet) and in
// the newest migration that defines lease_release_to, for a lone release
// (migration 18; migration 14 before it). A waiter that cannot
// parse it falls back to reading its grant, a statement no test of the
// set path would notice, so the two must stay the same expression.
func TestGrantWakeFormatsAgree(t *testing.T) {
	squash := func(s string) string { return strings.Join(strings.Fields(s), "") }
	var mig string
	for _, m := range Migrations("s") {
		if strings.Contains(m.SQL, `FUNCTION "s".lease_release_to(`) {
			mig = m.SQL // the newest definition wins
		}
	}
	if mig == "" {
		t.Fatal("no migration defines lease_release_to")
	}
	if !strings.Contains(squash(mig), squash(grantWakeSQL)) {
		t.Fatalf("lease_release_to's grant wake-up differs from grantWakeSQL:\n%s", grantWakeSQL)
	}
	if !strings.Contains(squash(sqlReleaseSet), squash(grantWakeSQL)) {
		t.Fatal("sqlReleaseSet no longer writes grantWakeSQL")
	}
}
