package mysql

// Statements returns how many SQL statements the store has sent to the
// server since Open (it implements bench.StatementCounter). Each Exec, Query
// and QueryRow counts once, though the driver sends one with arguments as a
// server-side prepared statement (prepare, execute, close: one statement);
// START TRANSACTION, COMMIT and ROLLBACK count, and so does the
// SET TRANSACTION ISOLATION LEVEL the driver sends before Audit's
// transaction. Pings and the session setup of a new connection do not. The
// count is taken in the driver's connections (see internal/sqlcount), so no
// statement escapes it whichever code path sends it.
func (s *Store) Statements() int64 { return s.stmts.Statements() }
