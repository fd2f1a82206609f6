package main

import (
	"fmt"
	"time"

	"github.com/lapsehq/lapse"
)

// retentionFlags are the flags of retention (docs/operations.md,
// Retention): lapse.RetentionConfig.
type retentionFlags struct {
	orders, tasks *time.Duration
	batch         *int
	every         *time.Duration
}

func addRetentionFlags(fs *flagSet) *retentionFlags {
	return &retentionFlags{
		orders: fs.Days("order-retention", 0, span{zero: "off", min: time.Second},
			"delete a finished order (PAID or CANCELLED, nothing owed, nothing undelivered, no work open) with every row that belongs to it this long after it was paid or cancelled, e.g. 35d (0: keep forever); open, flagged or undelivered orders are never deleted"),
		tasks: fs.Days("task-retention", 0, span{zero: "off", min: time.Second},
			"delete DONE stock tasks, order-service commands and refunds that no kept order reads this long after they were done, e.g. 35d (0: keep forever); DEAD ones are never deleted"),
		batch: fs.Int("retention-batch", 500, "the most orders (and rows of each work table) retention deletes in one transaction (1 to 10000); a run deletes at most 10 batches a second"),
		every: fs.Duration("retention-interval", time.Minute, span{min: 100 * time.Millisecond}, "how often retention runs (with --order-retention or --task-retention), from one instance at a time"),
	}
}

// config is lapse.Config.Retention from the flags.
func (f *retentionFlags) config() (lapse.RetentionConfig, error) {
	if *f.batch < 1 || *f.batch > 10000 {
		return lapse.RetentionConfig{}, fmt.Errorf("--retention-batch %d: want 1 to 10000", *f.batch)
	}
	return lapse.RetentionConfig{Orders: *f.orders, Tasks: *f.tasks, Batch: *f.batch, Every: *f.every}, nil
}
