package sqlite

// Statements returns how many SQL statements the store has sent to SQLite
// since Open, on the writer and the readers together (it implements
// bench.StatementCounter). Each Exec, Query and QueryRow counts once, and so
// do BEGIN, COMMIT and ROLLBACK; pings and the pragmas a new connection runs
// do not. A multi-statement string (a migration) counts once. The count is
// taken in the driver's connections (see internal/sqlcount), so no statement
// escapes it whichever code path sends it.
func (s *Store) Statements() int64 { return s.stmts.Statements() }
