package web

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"math"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/httpapi"
	"github.com/lapsehq/lapse/internal/money"
	"github.com/lapsehq/lapse/internal/plaintext"
	"github.com/lapsehq/lapse/order"
	"github.com/lapsehq/lapse/store"
)

var funcs = template.FuncMap{
	"when": func(t time.Time) string {
		if t.IsZero() {
			return "—"
		}
		return t.UTC().Format("2006-01-02 15:04:05.000")
	},
	"count": func(n int64, capped bool) string {
		s := strconv.FormatInt(n, 10)
		if capped {
			return s + "+"
		}
		return s
	},
	// money is every amount the dashboard prints (internal/money):
	// "10.37 USD", "1,299 JPY", "1.234 BHD".
	"money": money.Format,
	"items": func(items []order.Item) string {
		parts := make([]string, len(items))
		for i, it := range items {
			parts[i] = fmt.Sprintf("%s × %d", it.SKU, it.Qty)
		}
		return strings.Join(parts, ", ")
	},
}

func urlQueryEscape(s string) string { return url.QueryEscape(s) }

// localNext keeps a login's "next" on this site: a path, never a URL
// another host could be named in; anything else is the dashboard's root.
// A browser strips tabs and line breaks from a URL and reads "\" as "/", so
// "/<TAB>/evil.example" and "/\evil.example" are "//evil.example" to it,
// another host. So next must be valid UTF-8 without a control character,
// parse with no scheme, host or user, and start with "/" followed by neither
// "/" nor "\" — both as written and once percent-decoded (the path the
// browser ends up asking for). The dashboard's own next values (a request
// URI, escaped) always pass.
func localNext(next string) string {
	if !localPath(next) {
		return "/"
	}
	return next
}

func localPath(p string) bool {
	if !utf8.ValidString(p) || strings.IndexFunc(p, unicode.IsControl) >= 0 || !rootedOnce(p) {
		return false
	}
	u, err := url.Parse(p)
	if err != nil || u.Scheme != "" || u.Opaque != "" || u.Host != "" || u.User != nil {
		return false
	}
	return utf8.ValidString(u.Path) && strings.IndexFunc(u.Path, unicode.IsControl) < 0 && rootedOnce(u.Path)
}

// rootedOnce says whether p starts with "/" and then neither "/" nor "\".
func rootedOnce(p string) bool {
	return strings.HasPrefix(p, "/") && !strings.HasPrefix(p, "//") && !strings.HasPrefix(p, "/\\")
}

// ---- login

type loginView struct {
	base
	Next  string
	Wrong bool
	Wait  int // seconds: too many wrong tokens from this address
}

func (h *Handler) loginForm(w http.ResponseWriter, r *http.Request) {
	if !h.keys.has {
		http.Redirect(w, r, "/", http.StatusSeeOther)
		return
	}
	v := loginView{base: h.base(r, session{}, "Log in"), Next: localNext(r.URL.Query().Get("next"))}
	if err := h.render(w, "login", v); err != nil {
		h.log.Error("render login", "err", err)
	}
}

func (h *Handler) login(w http.ResponseWriter, r *http.Request) {
	if !h.keys.has {
		http.Redirect(w, r, "/", http.StatusSeeOther)
		return
	}
	if err := r.ParseForm(); err != nil {
		http.Error(w, "bad form", http.StatusBadRequest)
		return
	}
	next := localNext(r.PostForm.Get("next"))
	// A token from an address out of its budget of wrong ones is not looked
	// at (httpapi.AuthThrottle).
	if ok, wait, first := h.opts.AuthThrottle.Allow(r.RemoteAddr); !ok {
		if first {
			h.log.Warn("too many wrong tokens at the dashboard login from one address: it is answered 429 until its budget refills (logged once per burst)",
				"remote", r.RemoteAddr, "wait", wait.Round(time.Second))
		}
		secs := httpapi.RetryAfter(wait)
		w.Header().Set("Retry-After", strconv.Itoa(secs))
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.WriteHeader(http.StatusTooManyRequests)
		if err := h.render(w, "login", loginView{base: h.base(r, session{}, "Log in"), Next: next, Wait: secs}); err != nil {
			h.log.Error("render login", "err", err)
		}
		return
	}
	if !h.keys.tokenOK(r.PostForm.Get("token")) {
		if h.opts.AuthThrottle.Fail(r.RemoteAddr) {
			h.log.Warn("dashboard login with a wrong token (logged once per burst of them from one address)", "remote", r.RemoteAddr)
		}
		w.WriteHeader(http.StatusUnauthorized)
		if err := h.render(w, "login", loginView{base: h.base(r, session{}, "Log in"), Next: next, Wrong: true}); err != nil {
			h.log.Error("render login", "err", err)
		}
		return
	}
	s, err := newSession(true)
	if err != nil {
		http.Error(w, "cannot make a session", http.StatusInternalServerError)
		return
	}
	h.setSession(w, r, s)
	http.Redirect(w, r, next, http.StatusSeeOther)
}

func (h *Handler) logout(w http.ResponseWriter, r *http.Request, _ session) error {
	clearSession(w, r)
	target := "/ui/login"
	if !h.keys.has {
		target = "/"
	}
	http.Redirect(w, r, target, http.StatusSeeOther)
	return nil
}

// ---- overview

type statusCount struct {
	Status string
	N      int64
	Capped bool
	Link   string
}

type healthItem struct {
	Name, Text string
	OK         bool
}

type overviewView struct {
	base
	Counts       []statusCount
	Stuck        []statusCount
	Commands     *commandsCard
	Health       []healthItem
	Audit        *auditResult
	ChartData    string
	LatenessNote string
	Now          time.Time
	// RefreshMS is how often app.js fetches the overview's live fragment
	// (Options.RefreshEvery).
	RefreshMS int64
}

// liveFragment is the query value that asks the overview for its live
// parts only (the content, without the layout): what app.js refreshes.
const liveFragment = "live"

func (h *Handler) overview(w http.ResponseWriter, r *http.Request, s session) error {
	ctx := r.Context()
	st := h.svc.Store()
	ov, err := st.Overview(ctx, store.OverviewParams{CountCap: h.opts.CountCap})
	if err != nil {
		return err
	}
	v := overviewView{base: h.base(r, s, "Overview"), Now: ov.Now, RefreshMS: h.opts.RefreshEvery.Milliseconds()}
	for _, status := range []order.Status{order.Pending, order.Paying, order.Cancelling, order.Paid, order.Cancelled} {
		n := ov.ByStatus[status]
		if status == order.Cancelling && n == 0 && !v.Commanded {
			continue // order-service mode's: shown where it is used
		}
		v.Counts = append(v.Counts, statusCount{Status: string(status), N: n, Capped: n >= ov.CountCap, Link: "/ui/orders?status=" + string(status)})
	}
	v.Stuck = append(v.Stuck,
		statusCount{Status: "PAYING past deadline", N: ov.Stuck, Link: "/ui/orders?status=PAYING&past_deadline=1"},
		statusCount{Status: "refund_required", N: ov.RefundRequired, Capped: ov.RefundRequired >= ov.CountCap, Link: "/ui/orders?refund=1"})
	obs, err := st.OutboxStats(ctx)
	if err != nil {
		return err
	}
	var dead int64
	for _, sk := range obs.Sinks {
		dead += sk.Dead
	}
	v.Stuck = append(v.Stuck, statusCount{Status: "dead events", N: dead, Link: "/ui/events?dead=1"})
	ts, err := st.TaskStats(ctx)
	if err != nil {
		return err
	}
	v.Stuck = append(v.Stuck, statusCount{Status: "dead stock tasks", N: ts.Dead, Link: "/ui/tasks?dead=1"},
		statusCount{Status: "hook failures", N: ov.HookFailing, Capped: ov.HookFailing >= ov.CountCap, Link: "/ui/hook-failures"})
	if v.Commanded {
		cs, err := st.CommandStats(ctx)
		if err != nil {
			return err
		}
		v.Commands = newCommandsCard(cs)
	}
	v.Health = h.health(ctx)
	h.lastMu.Lock()
	v.Audit = h.lastAudit
	h.lastMu.Unlock()

	lat := h.lat.view(time.Now())
	v.LatenessNote = fmt.Sprintf("%d timeout cancels by this instance since %s", lat.Count, funcs["when"].(func(time.Time) string)(lat.Since))
	data, err := chartData(ov, lat)
	if err != nil {
		return err
	}
	v.ChartData = data
	if r.URL.Query().Get("fragment") == liveFragment {
		return h.renderFragment(w, "overview", v)
	}
	return h.render(w, "overview", v)
}

func (h *Handler) health(ctx context.Context) []healthItem {
	var out []healthItem
	pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	err := h.svc.Store().Ping(pctx)
	cancel()
	if err != nil {
		h.log.Warn("dashboard: store or timers do not answer", "err", err)
		out = append(out, healthItem{Name: "store and timers (readyz)", Text: "not answering (see the server log)"})
	} else {
		out = append(out, healthItem{Name: "store and timers (readyz)", OK: true, Text: "answering"})
	}
	if state, ok := h.svc.GatewayBreaker(); ok {
		out = append(out, healthItem{Name: "gateway circuit breaker", OK: state != "open", Text: state})
	} else if h.svc.HasGateway() {
		out = append(out, healthItem{Name: "gateway", OK: true, Text: "configured (no breaker state exposed)"})
	} else {
		out = append(out, healthItem{Name: "gateway", OK: true, Text: "none configured"})
	}
	skew, ok := gauge(h.svc, "lapse_store_clock_skew_seconds")
	switch {
	case !ok:
		out = append(out, healthItem{Name: "clock skew", OK: true, Text: "not measured yet"})
	default:
		out = append(out, healthItem{Name: "clock skew (this instance − store)", OK: math.Abs(skew) <= 1,
			Text: (time.Duration(skew * float64(time.Second))).Round(time.Millisecond).String()})
	}
	return out
}

// gauge reads a gauge of the service's registry.
func gauge(svc *lapse.Service, name string) (float64, bool) {
	mfs, err := svc.Registry().Gather()
	if err != nil {
		return 0, false
	}
	for _, mf := range mfs {
		if mf.GetName() == name && len(mf.GetMetric()) > 0 && mf.GetMetric()[0].GetGauge() != nil {
			return mf.GetMetric()[0].GetGauge().GetValue(), true
		}
	}
	return 0, false
}

// chartData is the JSON the charts are drawn from (read by static/app.js
// from a data attribute: no inline script).
func chartData(ov store.Overview, lat latenessView) (string, error) {
	minute := ov.Now.Truncate(time.Minute)
	fill := func(from time.Time, series []store.MinuteCount, n int) ([]int64, []int64) {
		xs, ys := make([]int64, n), make([]int64, n)
		at := map[int64]int64{}
		for _, m := range series {
			at[m.Minute.Unix()] += m.Count
		}
		for i := range n {
			t := from.Add(time.Duration(i) * time.Minute).Unix()
			xs[i], ys[i] = t, at[t]
		}
		return xs, ys
	}
	dueX, dueY := fill(minute, ov.Due, 61) // this minute and the 60 ahead
	behind := minute.Add(-59 * time.Minute)
	flowX, cancelled := fill(behind, ov.Cancelled, 60)
	_, paid := fill(behind, ov.Paid, 60)
	_, refunds := fill(behind, ov.Refunds, 60)
	ms := func(v []float64) []*float64 {
		out := make([]*float64, len(v))
		for i, x := range v {
			if !math.IsNaN(x) {
				y := x * 1000
				out[i] = &y
			}
		}
		return out
	}
	labels := make([]string, len(lat.Bounds))
	for i, b := range lat.Bounds {
		labels[i] = "≤" + (time.Duration(b * float64(time.Second))).String()
	}
	b, err := json.Marshal(map[string]any{
		"due":      map[string]any{"x": dueX, "y": dueY},
		"flow":     map[string]any{"x": flowX, "cancelled": cancelled, "paid": paid, "refunds": refunds},
		"lateness": map[string]any{"x": lat.Minutes, "p50": ms(lat.P50), "p99": ms(lat.P99)},
		"hist":     map[string]any{"labels": labels, "n": lat.Hist},
	})
	return string(b), err
}

// ---- audit

func (h *Handler) runAudit(w http.ResponseWriter, r *http.Request, _ session) error {
	if !h.auditMu.TryLock() {
		http.Redirect(w, r, "/?done=audit-busy", http.StatusSeeOther)
		return nil
	}
	defer h.auditMu.Unlock()
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), h.opts.AuditTimeout)
	defer cancel()
	start := time.Now()
	rep, err := h.svc.Audit(ctx, store.AuditParams{AllowedLag: 30 * time.Second, MaxExamples: 5})
	res := &auditResult{At: time.Now().UTC(), Took: time.Since(start).Round(time.Millisecond)}
	if err != nil {
		h.log.Error("dashboard audit", "err", err)
		res.Err = "the audit could not run to its end (timeout " + h.opts.AuditTimeout.String() + " or a store error; the server log says which)"
	} else {
		res.OK, res.Checks = rep.OK(), rep.Checks
		for _, c := range rep.Checks {
			if c.Warning {
				res.Warn += c.Count
			} else {
				res.Invalid += c.Count
			}
		}
	}
	h.lastMu.Lock()
	h.lastAudit = res
	h.lastMu.Unlock()
	http.Redirect(w, r, "/?done=audit", http.StatusSeeOther)
	return nil
}

// ---- orders

type ordersView struct {
	base
	Orders                  []order.Order
	Status, Prefix          string
	From, To                string
	Refund                  bool
	PastDeadline            bool
	Statuses                []string
	Next                    string
	Problem                 string
	NextRefundAfter, Cursor string
}

const formTime = "2006-01-02T15:04"

func (h *Handler) orders(w http.ResponseWriter, r *http.Request, s session) error {
	q := r.URL.Query()
	v := ordersView{base: h.base(r, s, "Orders"), Status: q.Get("status"), Prefix: q.Get("prefix"), From: q.Get("from"), To: q.Get("to"),
		Refund: q.Get("refund") == "1", PastDeadline: q.Get("past_deadline") == "1", Statuses: []string{"", "PENDING", "PAYING", "PAID", "CANCELLED"}}
	if v.Commanded {
		v.Statuses = slices.Insert(v.Statuses, 3, "CANCELLING")
	}
	p := store.FindOrdersParams{Status: order.Status(v.Status), IDPrefix: v.Prefix, RefundRequired: v.Refund, PastDeadline: v.PastDeadline,
		Limit: 50, Cursor: q.Get("cursor")}
	var problems []string
	if p.Status != "" && !p.Status.Valid() {
		problems = append(problems, "unknown status")
		p.Status = ""
	}
	if p.PastDeadline && !p.RefundRequired && p.Status != "" && p.Status != order.Pending && p.Status != order.Paying {
		problems = append(problems, "only a PENDING or PAYING order can be past its deadline: past deadline finds no "+string(p.Status)+" order")
	}
	for _, f := range []struct {
		val  string
		into *time.Time
		name string
	}{{v.From, &p.From, "from"}, {v.To, &p.To, "to"}} {
		if f.val == "" {
			continue
		}
		t, err := time.Parse(formTime, f.val)
		if err != nil {
			problems = append(problems, f.name+": want YYYY-MM-DDTHH:MM (UTC)")
			continue
		}
		*f.into = t
	}
	if p.Cursor != "" {
		_, id, err := store.DecodeCursor(p.Cursor)
		if err != nil {
			problems = append(problems, "the page cursor is not one this dashboard wrote")
			p.Cursor = ""
		} else if err := plaintext.Check("the page cursor's order id", id); err != nil {
			h.fail(w, r, s, http.StatusBadRequest, "invalid_cursor: "+err.Error())
			return nil
		}
	}
	v.Problem = strings.Join(problems, "; ")
	res, err := h.svc.Store().FindOrders(r.Context(), p)
	if err != nil {
		return err
	}
	v.Orders = res.Orders
	if res.NextCursor != "" {
		nq := url.Values{}
		for _, k := range orderFilters {
			if val := q.Get(k); val != "" {
				nq.Set(k, val)
			}
		}
		nq.Set("cursor", res.NextCursor)
		v.Next = "/ui/orders?" + nq.Encode()
	}
	return h.render(w, "orders", v)
}

// orderFilters are the orders page's query parameters, kept in its next
// page's link.
var orderFilters = []string{"status", "prefix", "from", "to", "refund", "past_deadline"}

// ---- search

// search goes to the order the box names: an order of that id, else the
// order whose payment attempt has that payment id (store.OrderOfPayment,
// the lapse_payments payment_id index), its attempt marked on the page.
func (h *Handler) search(w http.ResponseWriter, r *http.Request, s session) error {
	q := strings.TrimSpace(r.URL.Query().Get("q"))
	if q == "" {
		http.Redirect(w, r, "/ui/orders", http.StatusSeeOther)
		return nil
	}
	o, err := h.loadOrder(r.Context(), q)
	switch {
	case err == nil:
		http.Redirect(w, r, "/ui/orders/"+url.PathEscape(o.ID), http.StatusSeeOther)
		return nil
	case !errors.Is(err, errNotFound):
		return err
	}
	id, err := h.svc.Store().OrderOfPayment(r.Context(), q)
	switch {
	case err == nil:
		http.Redirect(w, r, "/ui/orders/"+url.PathEscape(id)+"?payment="+url.QueryEscape(q), http.StatusSeeOther)
		return nil
	case errors.Is(err, store.ErrNotFound):
		h.fail(w, r, s, http.StatusNotFound, "No order and no payment attempt has the id "+strconv.Quote(q)+".")
		return nil
	case errors.Is(err, store.ErrInvalid):
		h.fail(w, r, s, http.StatusConflict, "Several orders have a payment attempt "+strconv.Quote(q)+": "+err.Error())
		return nil
	}
	return err
}

// ---- one order

type timelineEntry struct {
	At   time.Time
	What string
}

type orderView struct {
	base
	Order order.Order
	// Payment is the payment id a search found the order by: its attempt
	// is marked.
	Payment   string
	Timeline  []timelineEntry
	CanCancel bool
	CanCheck  bool
	// The operator's actions (operator.go).
	CanForceCheck, CanExtend, CanOperatorCancel bool
	// CanRefundNow: the gateway refunds, so an attempt that owes money
	// can be refunded through it; marking one refunded by hand is always
	// offered (refunds.go).
	CanRefundNow bool
	Check        *lapse.PaymentCheck
	CheckError   string
	// Refunds are the order's refunds, DONE ones too.
	Refunds []order.Refund
}

// setActions sets which actions v's order page offers.
func (h *Handler) setActions(v *orderView) {
	o, now := v.Order, h.now()
	v.CanCancel, v.CanCheck = o.Status == order.Pending, h.svc.HasGateway()
	v.CanForceCheck, v.CanExtend, v.CanOperatorCancel = canForceCheck(h.svc, o), canExtend(o, now), canOperatorCancel(h.svc, o, now)
	v.CanRefundNow = h.svc.CanRefund()
}

// setDetails reads what v's order page shows beside the order: its
// timeline and its refunds.
func (h *Handler) setDetails(ctx context.Context, v *orderView) error {
	evs, err := h.svc.Store().OrderEvents(ctx, v.Order.ID)
	if err != nil {
		return err
	}
	v.Timeline = timeline(v.Order, evs)
	rs, err := h.svc.ListRefunds(ctx, store.ListTasksParams{OrderID: v.Order.ID, Limit: lapse.MaxRefundsLimit})
	if err != nil {
		return err
	}
	v.Refunds = rs.Refunds
	h.setActions(v)
	v.Title = "Order " + v.Order.ID
	return nil
}

func (h *Handler) loadOrder(ctx context.Context, id string) (order.Order, error) {
	o, err := h.svc.Get(ctx, id)
	if errors.Is(err, store.ErrNotFound) {
		return o, errNotFound
	}
	return o, err
}

func (h *Handler) order(w http.ResponseWriter, r *http.Request, s session) error {
	o, err := h.loadOrder(r.Context(), r.PathValue("id"))
	if errors.Is(err, errNotFound) {
		h.fail(w, r, s, http.StatusNotFound, "no such order")
		return nil
	}
	if err != nil {
		return err
	}
	v := orderView{base: h.base(r, s, "Order"), Order: o, Payment: r.URL.Query().Get("payment")}
	if err := h.setDetails(r.Context(), &v); err != nil {
		return err
	}
	return h.render(w, "order", v)
}

// timeline is every dated fact of an order, oldest first: its transitions'
// timestamps, its payment attempts and stock tasks, and the outbox events
// still stored.
func timeline(o order.Order, evs []order.Event) []timelineEntry {
	var t []timelineEntry
	add := func(at time.Time, what string) {
		if !at.IsZero() {
			t = append(t, timelineEntry{At: at, What: what})
		}
	}
	add(o.CreatedAt, "created (PENDING)")
	add(o.ExpiresAt, "expires_at: payment window ends")
	add(o.CancelAfter, "cancel_after: the timer fires")
	for _, p := range o.Payments {
		add(p.CreatedAt, "payment attempt "+p.PaymentID+" started")
		if !p.UpdatedAt.Equal(p.CreatedAt) {
			add(p.UpdatedAt, "payment attempt "+p.PaymentID+": "+string(p.Status))
		}
	}
	add(o.PaidAt, "PAID")
	if !o.CancelledAt.IsZero() {
		add(o.CancelledAt, "CANCELLED ("+string(o.CancelReason)+")")
	}
	for _, tk := range o.Tasks {
		add(tk.CreatedAt, "stock task "+string(tk.Action)+" written")
		add(tk.DoneAt, "stock task "+string(tk.Action)+" done: "+tk.Result)
		add(tk.DeadAt, "stock task "+string(tk.Action)+" DEAD: "+tk.LastError)
	}
	for _, c := range o.Commands {
		add(c.CreatedAt, "cancel command written (CANCELLING)")
		add(c.DoneAt, "cancel command answered: "+c.Result)
		add(c.DeadAt, "cancel command DEAD: "+c.LastError)
	}
	for _, ev := range evs {
		add(ev.CreatedAt, "event "+ev.Type+" written (seq "+strconv.FormatInt(ev.Seq, 10)+")")
	}
	slices.SortStableFunc(t, func(a, b timelineEntry) int { return a.At.Compare(b.At) })
	return t
}

// ---- confirmations and actions

type confirmView struct {
	base
	Order  order.Order
	Action string
	Verb   string
	What   string
	// Payment is the attempt a refund acts on.
	Payment *order.Payment
}

var actions = map[string]struct{ verb, what string }{
	"cancel":          {"Cancel the order", "The buyer's cancel: the order becomes CANCELLED and its stock is released at once. Only a PENDING order can be cancelled."},
	"check":           {"Check the payment now", "Ask the payment gateway about this order now. A payment it reports is recorded (PAID, or refund_required if the order cannot be paid any more); any other answer changes nothing."},
	"force-check":     {"Run the gateway check now", "Run the check the order's deadline runs, at once. Past the deadline: a payment the gateway reports is recorded, an unpaid trade is closed at the gateway and the order cancelled, a closed one cancelled. Before it only the question is asked."},
	"extend":          {"Extend the deadline", "Move the end of the payment window to this long from now (later or earlier); cancel_after moves with it, keeping the grace, and the order's timer follows."},
	"refund":          {"Refund now", "Give this payment attempt's money back now, through the payment gateway, under the attempt's own refund key (one refund, however often asked). Once the gateway has refunded, the attempt is REFUNDED and order.refunded is written; refund_required clears when no attempt of the order owes money."},
	"mark-refunded":   {"Mark refunded", "Record that this payment attempt's money went back outside lapse (the gateway's console, a bank transfer): the gateway is not asked. The attempt becomes REFUNDED and order.refunded is written with your note, as done from the dashboard, at this time."},
	"operator-cancel": {"Cancel as operator", "Cancel this PAYING order, past its deadline, as an operator: it becomes CANCELLED with cancel_reason operator, its stock is released and its open payment attempts end FAILED. lapse first closes its trade at the gateway, and cancels only if the close succeeded; if you closed the trade by hand (the gateway cannot answer), say so below and lapse skips the close."},
}

func (h *Handler) confirm(w http.ResponseWriter, r *http.Request, s session) error {
	a, ok := actions[r.PathValue("action")]
	if !ok {
		h.fail(w, r, s, http.StatusNotFound, "no such page")
		return nil
	}
	o, err := h.loadOrder(r.Context(), r.PathValue("id"))
	if errors.Is(err, errNotFound) {
		h.fail(w, r, s, http.StatusNotFound, "no such order")
		return nil
	}
	if err != nil {
		return err
	}
	v := confirmView{base: h.base(r, s, a.verb), Order: o, Action: r.PathValue("action"), Verb: a.verb, What: a.what}
	if v.Action == "refund" || v.Action == "mark-refunded" {
		p, ok := owedAttempt(o, r.URL.Query().Get("payment"))
		if !ok {
			h.fail(w, r, s, http.StatusBadRequest, "name a payment attempt of this order that owes money back (payment)")
			return nil
		}
		v.Payment = &p
	}
	return h.render(w, "confirm", v)
}

func (h *Handler) act(w http.ResponseWriter, r *http.Request, s session) error {
	id, action := r.PathValue("id"), r.PathValue("action")
	back := "/ui/orders/" + url.PathEscape(id)
	switch action {
	case "cancel":
		_, err := h.svc.Cancel(r.Context(), id)
		switch {
		case errors.Is(err, store.ErrNotPending):
			http.Redirect(w, r, back+"?done=not-pending", http.StatusSeeOther)
			return nil
		case errors.Is(err, store.ErrNotFound):
			h.fail(w, r, s, http.StatusNotFound, "no such order")
			return nil
		case err != nil:
			return err
		}
		http.Redirect(w, r, back+"?done=cancelled", http.StatusSeeOther)
		return nil
	case "extend":
		return h.extend(w, r, s, id, back)
	case "operator-cancel":
		return h.operatorCancel(w, r, s, id, back)
	case "refund", "mark-refunded":
		return h.refund(w, r, s, id, back, action == "mark-refunded")
	case "check", "force-check":
		o, err := h.loadOrder(r.Context(), id)
		if errors.Is(err, errNotFound) {
			h.fail(w, r, s, http.StatusNotFound, "no such order")
			return nil
		}
		if err != nil {
			return err
		}
		v := orderView{base: h.base(r, s, "Order"), CanCheck: h.svc.HasGateway()}
		check := h.svc.CheckPayment
		if action == "force-check" {
			check = h.svc.CheckNow
		}
		res, err := check(r.Context(), id)
		if err != nil {
			h.log.Warn("dashboard payment check", "order_id", id, "err", err)
			v.CheckError = "the gateway could not be asked: " + err.Error()
		} else {
			v.Check, o = &res, res.Order
		}
		v.Order = o
		if err := h.setDetails(r.Context(), &v); err != nil {
			return err
		}
		return h.render(w, "order", v)
	}
	h.fail(w, r, s, http.StatusNotFound, "no such action")
	return nil
}

// commandsCard is the overview's view of order-service mode's cancel
// commands: the backlog, the DEAD ones, and how long the oldest has waited.
type commandsCard struct {
	Pending, Dead int64
	// Oldest is the age of the oldest PENDING command, "—" when none.
	Oldest string
	// Late: the oldest has waited more than a minute.
	Late bool
}

func newCommandsCard(st store.TaskStats) *commandsCard {
	c := &commandsCard{Pending: st.Pending, Dead: st.Dead, Oldest: "—"}
	if !st.OldestPending.IsZero() {
		age := max(st.Now.Sub(st.OldestPending), 0)
		c.Oldest, c.Late = age.Round(time.Second).String(), age > time.Minute
		if age < time.Second {
			c.Oldest = age.Round(time.Millisecond).String()
		}
	}
	return c
}

// ---- SKUs, events, tasks, commands

type skusView struct {
	base
	SKUs []store.SKU
	Next string
}

func (h *Handler) skus(w http.ResponseWriter, r *http.Request, s session) error {
	v := skusView{base: h.base(r, s, "SKUs")}
	if !v.Remote {
		skus, err := h.svc.Store().ListSKUs(r.Context(), r.URL.Query().Get("after"), 101)
		if err != nil {
			return err
		}
		if len(skus) > 100 {
			skus = skus[:100]
			v.Next = "/ui/skus?after=" + url.QueryEscape(skus[99].SKU)
		}
		v.SKUs = skus
	}
	return h.render(w, "skus", v)
}

type eventsView struct {
	base
	Events []store.EventDelivery
	Dead   bool
	Next   string
}

func (h *Handler) events(w http.ResponseWriter, r *http.Request, s session) error {
	dead := r.URL.Query().Get("dead") == "1"
	after, _ := strconv.ParseInt(r.URL.Query().Get("after"), 10, 64)
	page, err := h.svc.ListEvents(r.Context(), store.ListEventsParams{Dead: dead, After: max(after, 0), Limit: 100})
	if err != nil {
		return err
	}
	v := eventsView{base: h.base(r, s, "Events"), Events: page.Events, Dead: dead}
	if page.NextAfter != 0 {
		v.Next = fmt.Sprintf("/ui/events?dead=%s&after=%d", map[bool]string{true: "1", false: "0"}[dead], page.NextAfter)
	}
	return h.render(w, "events", v)
}

type tasksView struct {
	base
	Tasks []order.StockTask
	Dead  bool
	Next  string
}

func (h *Handler) tasks(w http.ResponseWriter, r *http.Request, s session) error {
	q := workQuery(r)
	page, err := h.svc.ListTasks(r.Context(), q)
	if h.refused(w, r, s, err) {
		return nil
	}
	if err != nil {
		return err
	}
	v := tasksView{base: h.base(r, s, "Stock tasks"), Tasks: page.Tasks, Dead: q.Dead, Next: nextWorkPage("/ui/tasks", q.Dead, page.NextAfter)}
	return h.render(w, "tasks", v)
}

type hookFailuresView struct {
	base
	Failures []store.HookFailure
}

// hookFailures lists the PENDING orders whose hook of an embedding service
// keeps failing (store.HookFailures), the oldest first failure first.
func (h *Handler) hookFailures(w http.ResponseWriter, r *http.Request, s session) error {
	fs, err := h.svc.HookFailures(r.Context(), 100)
	if err != nil {
		return err
	}
	return h.render(w, "hookfailures", hookFailuresView{base: h.base(r, s, "Hook failures"), Failures: fs})
}

type commandsView struct {
	base
	Commands []order.Command
	Dead     bool
	Next     string
}

// commands lists order-service mode's cancel commands: not DONE, or with
// dead=1 the DEAD ones. Read-only, as the tasks' and events' lists: an
// operator sends them again or purges them through the API.
func (h *Handler) commands(w http.ResponseWriter, r *http.Request, s session) error {
	q := workQuery(r)
	page, err := h.svc.ListCommands(r.Context(), q)
	if h.refused(w, r, s, err) {
		return nil
	}
	if err != nil {
		return err
	}
	v := commandsView{base: h.base(r, s, "Cancel commands"), Commands: page.Commands, Dead: q.Dead, Next: nextWorkPage("/ui/commands", q.Dead, page.NextAfter)}
	return h.render(w, "commands", v)
}
