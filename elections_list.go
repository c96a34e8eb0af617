package sentinel

// This file: Client.Elections: the operator's list of election groups (ElectionFilter, Election).

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// ElectionFilter selects the groups Client.Elections lists. The zero value
// lists the groups of the client's namespace.
type ElectionFilter struct {
	// Namespace limits the listing to one namespace. Default: the client's.
	Namespace string
	// AllNamespaces lists every namespace; Namespace must then be empty.
	AllNamespaces bool
	// Limit caps the number of groups. Default 1000; at most 100000.
	Limit int
}

// Election summarises one election group as Client.Elections lists it.
type Election struct {
	Namespace string
	Group     string
	// Leader is the group's current leader, nil when it has none now
	// (resigned, or expired by the database clock).
	Leader *Leader
	// Members is the number of live electors (member rows not expired by
	// the database clock).
	Members int
}

// Elections lists the election groups known to the database, ordered by
// namespace and group, read in one statement: every group that has a
// leadership row (kept after resignation until Prune removes it, once
// expired for longer than the retention and an hour) or a
// live elector. Leadership and liveness are decided by the database clock.
// Bad filter values return an error matching ErrInvalid.
// A nil ctx is refused (ErrInvalid).
func (c *Client) Elections(ctx context.Context, f ElectionFilter) ([]Election, error) {
	if err := checkCtx("Client.Elections", ctx); err != nil {
		return nil, err
	}
	if err := c.checkOpen(); err != nil {
		return nil, err
	}
	ns, err := c.listNamespace("ElectionFilter", f.Namespace, f.AllNamespaces)
	if err != nil {
		return nil, err
	}
	limit, err := listLimit(f.Limit)
	if err != nil {
		return nil, err
	}
	s := c.sql.schema
	q := `WITH g AS (
    SELECT namespace, election FROM ` + s + `.leaders WHERE ($1 = '' OR namespace = $1)
    UNION
    SELECT namespace, election FROM ` + s + `.members
    WHERE ($1 = '' OR namespace = $1) AND expires_at > pg_catalog.clock_timestamp()
)
SELECT g.namespace, g.election, l.owner, l.host, l.pid, l.app_version, l.term, l.elected_at, l.expires_at,
    (SELECT pg_catalog.count(*) FROM ` + s + `.members m
     WHERE m.namespace = g.namespace AND m.election = g.election
       AND m.expires_at > pg_catalog.clock_timestamp())
FROM g
LEFT JOIN ` + s + `.leaders l ON l.namespace = g.namespace AND l.election = g.election
    AND l.expires_at > pg_catalog.clock_timestamp()
ORDER BY g.namespace, g.election
LIMIT $2`
	rows, err := c.pool.Query(ctx, q, ns, limit)
	if err != nil {
		return nil, c.wrapErr("list elections", err)
	}
	es, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Election, error) {
		var (
			e                    Election
			owner, host, version *string
			pid                  *int
			term                 *int64
			elected, expires     *time.Time
		)
		if err := r.Scan(&e.Namespace, &e.Group, &owner, &host, &pid, &version, &term, &elected, &expires, &e.Members); err != nil {
			return e, err
		}
		if owner != nil {
			e.Leader = &Leader{Namespace: e.Namespace, Group: e.Group, Owner: *owner, Host: *host, PID: *pid,
				AppVersion: *version, Term: *term, ElectedAt: *elected, ExpiresAt: *expires}
		}
		return e, nil
	})
	if err != nil {
		return nil, c.wrapErr("list elections", err)
	}
	return es, nil
}

// String names the group as namespace/group, for messages.
func (e Election) String() string { return fmt.Sprintf("%s/%s", e.Namespace, e.Group) }
