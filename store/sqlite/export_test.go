package sqlite

// GroupStats is what group commit did: groups committed and the orders they
// held.
func (s *Store) GroupStats() (groups, orders int64) { return s.groupsRun.Load(), s.grouped.Load() }
