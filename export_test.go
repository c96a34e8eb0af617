package sentinel

import "context"

// WithFollowStarted returns a ctx for Follow or FollowQueues that calls f
// once the follower holds its starting position: events committed after f
// ran are delivered. Tests use it instead of sleeping.
func WithFollowStarted(ctx context.Context, f func()) context.Context {
	return context.WithValue(ctx, followStartedKey{}, f)
}
