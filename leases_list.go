package sentinel

// This file: Client.Leases: the operator's list of held leases (LeaseFilter), and the namespace and limit checks the lists share.

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
)

// LeaseFilter selects the leases Client.Leases lists. The zero value lists
// the live leases of the client's namespace.
type LeaseFilter struct {
	// Namespace limits the listing to one namespace. Default: the client's.
	Namespace string
	// AllNamespaces lists every namespace; Namespace must then be empty.
	AllNamespaces bool
	// Prefix keeps only keys starting with it.
	Prefix string
	// IncludeExpired also lists rows whose lease expired or was released
	// (kept until Prune removes them); their ExpiresAt is in the past.
	IncludeExpired bool
	// Limit caps the number of rows. Default 1000; at most 100000.
	Limit int
}

// Leases lists lease holders ordered by namespace and key, read in one
// statement. Liveness is decided by the database clock: without
// IncludeExpired only leases whose expiry is in the future are listed.
// A nil ctx is refused (ErrInvalid).
func (c *Client) Leases(ctx context.Context, f LeaseFilter) ([]Holder, error) {
	if err := checkCtx("Client.Leases", ctx); err != nil {
		return nil, err
	}
	if err := c.checkOpen(); err != nil {
		return nil, err
	}
	ns, err := c.listNamespace("LeaseFilter", f.Namespace, f.AllNamespaces)
	if err != nil {
		return nil, err
	}
	if len(f.Prefix) > MaxKeyLen || f.Prefix != storableText(f.Prefix) {
		return nil, invalid("Prefix", "must be at most %d bytes of UTF-8 without NUL", MaxKeyLen)
	}
	limit, err := listLimit(f.Limit)
	if err != nil {
		return nil, err
	}
	q := `SELECT namespace, key, owner, host, pid, token, acquired_at, expires_at,
    nullif(hard_expires_at, 'infinity')
FROM ` + c.sql.schema + `.leases
WHERE ($1 = '' OR namespace = $1) AND ($2 = '' OR pg_catalog.starts_with(key, $2))
  AND ($3::bool OR expires_at > pg_catalog.clock_timestamp())
ORDER BY namespace, key
LIMIT $4`
	rows, err := c.pool.Query(ctx, q, ns, f.Prefix, f.IncludeExpired, limit)
	if err != nil {
		return nil, c.wrapErr("list leases", err)
	}
	hs, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Holder, error) {
		var h Holder
		var hard *time.Time
		err := r.Scan(&h.Namespace, &h.Key, &h.Owner, &h.Host, &h.PID, &h.Token, &h.AcquiredAt, &h.ExpiresAt, &hard)
		if hard != nil {
			h.HardExpiresAt = *hard
		}
		return h, err
	})
	if err != nil {
		return nil, c.wrapErr("list leases", err)
	}
	return hs, nil
}

// listNamespace resolves a listing's namespace filter: "" means every
// namespace (all), else ns or, when empty, the client's namespace. filter
// names the filter type in the error for setting both.
func (c *Client) listNamespace(filter, ns string, all bool) (string, error) {
	switch {
	case all && ns != "":
		return "", invalid(filter, "set Namespace or AllNamespaces, not both")
	case all:
		return "", nil
	case ns == "":
		ns = c.cfg.Namespace
	}
	if err := checkNamespace(ns); err != nil {
		return "", err
	}
	return ns, nil
}

// listLimit resolves a listing's Limit: 0 means 1000, at most 100000.
func listLimit(limit int) (int, error) {
	switch {
	case limit < 0 || limit > 100000:
		return 0, invalid("Limit", "must be in 0..100000, got %d", limit)
	case limit == 0:
		return 1000, nil
	}
	return limit, nil
}
