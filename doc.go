// Package lapse cancels orders that are not paid in time — exactly once, close
// to their deadline, with their reserved stock released — and never cancels an
// order that is being paid or was paid.
//
// # Guarantees
//
//   - Every state change is one conditional UPDATE in one local transaction
//     (with its stock movement and its outbox event); the affected-row count
//     decides a race, so a timer, a buyer and a payment callback arriving at
//     the same instant cannot both win.
//   - A timeout cancel happens only when the store's clock has passed
//     cancel_after = expires_at + grace; a timer firing early is rescheduled.
//   - An order in PAYING is never cancelled blind: it waits for the payment
//     outcome (or, with a gateway, for the gateway's answer).
//   - Stock is reserved at create, released with the cancel and committed with
//     the payment, each at most once per order and SKU (a ledger row with a
//     unique key).
//   - The database row is the durable timer: a scheduler that loses its timers
//     is seeded again from the store.
//
// A Service needs a store.Store (the embedded default is store/sqlite) and a
// timer.Scheduler (the default is timer/memory). The HTTP API is in httpapi,
// the CLI in cmd/lapse.
package lapse
