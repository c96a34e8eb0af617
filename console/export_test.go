package console

import "time"

// SetClock sets the clock cs reads (the console's, not the database's):
// a test skews it to play a console host whose clock is off.
func SetClock(cs *Console, now func() time.Time) { cs.now = now }
