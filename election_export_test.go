package sentinel

// ElectorLockedBackoffs is how many times el's Run backed off from an
// expired leadership row it could not take, another transaction holding it.
func ElectorLockedBackoffs(el *Elector) int64 { return el.lockedBackoffs.Load() }

// ElectorWaitBackoffs is how many times el's Run backed off after a
// registration as waiting that registered nothing (the group's row locked
// by another transaction, or an error).
func ElectorWaitBackoffs(el *Elector) int64 { return el.waitBackoffs.Load() }
