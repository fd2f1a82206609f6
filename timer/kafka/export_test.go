package kafka

// SetKillAfterForward makes s's ladder stop after a forward was produced and
// before it is committed, whenever kill returns true: a process that died there.
func SetKillAfterForward(s *Scheduler, kill func() bool) { s.killAfterForward = kill }

// Forwarded is how many timers s's ladder forwarded.
func Forwarded(s *Scheduler) uint64 { return s.stats.forwarded.Load() }

// Paused is how many times s's ladder paused a partition.
func Paused(s *Scheduler) uint64 { return s.stats.paused.Load() }
