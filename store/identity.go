package store

import "context"

// Identified is a store that can name the data it holds, for fencing what
// one deployment shares with no other: lapse serve claims its RabbitMQ
// timer prefix with it. Every instance of a deployment reads the same
// identity (it comes from the database, not from the URL that reaches it);
// two databases, or two schemas of one, have different ones (a restored
// copy of one has the same).
type Identified interface {
	// Identity is the store's kind and when its first migration was
	// applied, e.g. "postgres:2026-11-02T10:00:00.123456Z".
	Identity(ctx context.Context) (string, error)
}
