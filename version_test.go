package sentinel_test

import (
	"os"
	"regexp"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sentinel-coordination/sentinel"
)

// Version is a semantic version no older than the newest release in
// CHANGELOG.md: the newest one itself, or a pre-release ("-dev") of a
// later one.
func TestVersionFollowsChangelog(t *testing.T) {
	m := regexp.MustCompile(`^(\d+)\.(\d+)\.(\d+)(-[0-9A-Za-z.-]+)?$`).FindStringSubmatch(sentinel.Version)
	require.NotNil(t, m, "Version %q is not a semantic version", sentinel.Version)
	log, err := os.ReadFile("CHANGELOG.md")
	require.NoError(t, err)
	r := regexp.MustCompile(`(?m)^## \[(\d+)\.(\d+)\.(\d+)\]`).FindSubmatch(log)
	require.NotNil(t, r, "no released version in CHANGELOG.md")
	cmp := 0
	for i := 1; i <= 3 && cmp == 0; i++ {
		a, _ := strconv.Atoi(m[i])
		b, _ := strconv.Atoi(string(r[i]))
		cmp = a - b
	}
	released := string(r[1]) + "." + string(r[2]) + "." + string(r[3])
	if m[4] == "" {
		require.GreaterOrEqual(t, cmp, 0, "Version %s is older than the release %s", sentinel.Version, released)
	} else {
		require.Positive(t, cmp, "Version %s is a pre-release of %s or older, which is released", sentinel.Version, released)
	}
}
