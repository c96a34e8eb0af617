package sentinel

// ElectorLockedBackoffs is how many times el's Run backed off from an
// expired leadership row it could not take, another transaction holding it.
func ElectorLockedBackoffs(el *Elector) int64 { return el.lockedBackoffs.Load() }
