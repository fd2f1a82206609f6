// Package reference is a reference inventory service: the other side of
// lapse's stock commands (package inventory), runnable as `lapse inventory`
// and meant to be copied by a team writing its own.
//
// What a real inventory needs, and this one shows:
//
//   - Counters per SKU (available, reserved, sold) and a ledger with one
//     row per applied (reservation, action), unique, written in the same
//     transaction as the counter moves: a command delivered twice — a
//     retry, a redelivery, two at once — is applied once and answered
//     ALREADY_DONE the second time (Store.Apply has the table of answers).
//   - A release of a reservation it never saw is recorded as a tombstone,
//     so that the reserve it overtook is refused when it arrives.
//   - Both transports answer from the same Applier: HTTP here (Handler,
//     CommandHandler), RabbitMQ through the inventory package.
//
// And what a test needs: fault switches (Faulty) that fail, slow down,
// withhold answers or reject, and a Server that stops and starts again on
// the same address and store ("the inventory goes away").
//
// The store is SQLite (modernc.org/sqlite, no server) or PostgreSQL (pgx),
// both through database/sql, with the statements in sqlite.sql and
// postgres.sql and the schema in embedded migrations; the tables are
// prefixed inv_ so that they can share a database with lapse's own.
package reference
