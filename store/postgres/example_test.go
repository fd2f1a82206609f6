package postgres_test

import (
	"context"
	"fmt"
	"log"

	"github.com/lapsehq/lapse/store"
	"github.com/lapsehq/lapse/store/postgres"
)

// A store on a PostgreSQL server, migrated, sweeping due orders the way the
// sql timer backend does. Without a Clock, every guard compares against the
// database's clock, so instances on hosts whose clocks drift agree.
func ExampleOpen() {
	ctx := context.Background()
	s, err := postgres.Open(ctx, postgres.Config{URL: "postgres://lapse@db.internal:5432/lapse?sslmode=verify-full"})
	if err != nil {
		log.Fatal(err)
	}
	defer s.Close()
	if err := s.Migrate(ctx); err != nil { // safe to run from every instance at start
		log.Fatal(err)
	}
	res, err := s.CancelDue(ctx, store.CancelDueParams{Claim: 200})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("cancelled %d orders due by %s\n", len(res.Cancelled), res.Now)
}
