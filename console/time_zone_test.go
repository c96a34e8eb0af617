package console_test

import (
	"html"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sentinel-coordination/sentinel/console"
)

// A time filter written without a zone (as a browser's datetime-local
// sends it) is read as UTC, and the page says so, with the time it read;
// one with a zone gets no such note.
func TestTimeFilterWithoutZoneSaysItIsUTC(t *testing.T) {
	c, _ := newClient(t)
	s := server(t, c, console.Options{ReadOnly: true})
	code, body := get(t, s.URL+"/ops/?after=2026-11-22T09:30&before=2026-11-22T10:00:00Z")
	require.Equal(t, http.StatusOK, code, body)
	body = html.UnescapeString(body)
	require.Contains(t, body, `"2026-11-22T09:30" has no zone: read as UTC, 2026-11-22 09:30:00Z.`, "the page did not say which zone it read the time in")
	require.NotContains(t, body, `"2026-11-22T10:00:00Z" has no zone`)
	require.Contains(t, body, "(UTC unless a zone is given)")
}
