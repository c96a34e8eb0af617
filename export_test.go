package sentinel

import "context"

// WithFollowStarted returns a ctx for Follow or FollowQueues that calls f
// once the follower holds its starting position: events committed after f
// ran are delivered. Tests use it instead of sleeping.
func WithFollowStarted(ctx context.Context, f func()) context.Context {
	return context.WithValue(ctx, followStartedKey{}, f)
}

// RenewSQL is c's heartbeat renewal statement.
func RenewSQL(c *Client) string { return c.sql.renew }

// SetSQL is c's set statement of coalescer kind kind.
func SetSQL(c *Client, kind int) string { return c.co.set[kind] }

// SetPlanSQL is the statement sent before every set statement.
const SetPlanSQL = sqlSetPlan
