package bench

import (
	"bufio"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
)

// Names of the service's metrics the harness reads (see lapse's metrics.go).
const (
	metricCancelled   = "lapse_orders_cancelled_total"
	metricLateness    = "lapse_cancel_lateness_seconds"
	metricSweepCaught = "lapse_sweep_caught_total"
	metricCommands    = "lapse_order_commands_total"
	metricHandoffs    = "lapse_order_command_handoffs_total"
	metricRetention   = "lapse_retention_deleted_total"
)

// counts is what the harness reads from the service's metrics while it runs:
// enough for the progress line and to know when every cancel has landed.
type counts struct {
	cancelled   float64 // timeout cancels
	sweepCaught float64
	lateness    histogram
	// commandsFinal counts the order service's final answers (order-service
	// mode): cancelled, already_cancelled, already_paid.
	commandsFinal float64
	// handoffs counts the cancel batches whose commands the dispatcher
	// took as written (held) or not (busy).
	handoffsHeld, handoffsBusy float64
	// retained counts the orders retention deleted.
	retained float64
}

func (c *counts) addHandoff(outcome string, v float64) {
	switch outcome {
	case "held":
		c.handoffsHeld += v
	case "busy":
		c.handoffsBusy += v
	}
}

// finalAnswer reports whether a result label of lapse_order_commands_total
// is an answer that ends its command with its order's transition.
func finalAnswer(result string) bool {
	return result == "cancelled" || result == "already_cancelled" || result == "already_paid"
}

// minus returns c - base, for a server that ran before the bench started.
func (c counts) minus(base counts) counts {
	return counts{
		cancelled:     c.cancelled - base.cancelled,
		sweepCaught:   c.sweepCaught - base.sweepCaught,
		lateness:      c.lateness.minus(base.lateness),
		commandsFinal: c.commandsFinal - base.commandsFinal,
		handoffsHeld:  c.handoffsHeld - base.handoffsHeld,
		handoffsBusy:  c.handoffsBusy - base.handoffsBusy,
		retained:      c.retained - base.retained,
	}
}

// plus adds the counts of another Service (one per restart).
func (c counts) plus(o counts) counts {
	return counts{
		cancelled:     c.cancelled + o.cancelled,
		sweepCaught:   c.sweepCaught + o.sweepCaught,
		lateness:      c.lateness.plus(o.lateness),
		commandsFinal: c.commandsFinal + o.commandsFinal,
		handoffsHeld:  c.handoffsHeld + o.handoffsHeld,
		handoffsBusy:  c.handoffsBusy + o.handoffsBusy,
		retained:      c.retained + o.retained,
	}
}

// histogram is a Prometheus histogram: cumulative counts by upper bound
// (seconds), +Inf last.
type histogram struct {
	bounds []float64
	counts []float64
}

func (h histogram) plus(o histogram) histogram {
	if len(h.bounds) == 0 {
		return o
	}
	if len(o.bounds) == 0 {
		return h
	}
	out := histogram{bounds: slices.Clone(h.bounds), counts: slices.Clone(h.counts)}
	for i, b := range o.bounds {
		if j := slices.Index(out.bounds, b); j >= 0 {
			out.counts[j] += o.counts[i]
		}
	}
	return out
}

func (h histogram) minus(base histogram) histogram {
	out := histogram{bounds: slices.Clone(h.bounds), counts: slices.Clone(h.counts)}
	for i, b := range base.bounds {
		if j := slices.Index(out.bounds, b); j >= 0 {
			out.counts[j] -= base.counts[i]
		}
	}
	return out
}

// quantile estimates the q-quantile in seconds the way PromQL's
// histogram_quantile does: linear interpolation inside the bucket that holds
// it. NaN when the histogram is empty.
func (h histogram) quantile(q float64) float64 {
	if len(h.counts) == 0 {
		return math.NaN()
	}
	total := h.counts[len(h.counts)-1]
	if total <= 0 {
		return math.NaN()
	}
	rank := q * total
	for i, c := range h.counts {
		if c < rank {
			continue
		}
		if math.IsInf(h.bounds[i], 1) {
			if i == 0 {
				return math.NaN()
			}
			return h.bounds[i-1] // beyond the last finite bucket: its bound is all we know
		}
		lo, below := 0.0, 0.0
		if i > 0 {
			lo, below = h.bounds[i-1], h.counts[i-1]
		}
		if c == below {
			return h.bounds[i]
		}
		return lo + (h.bounds[i]-lo)*(rank-below)/(c-below)
	}
	return h.bounds[len(h.bounds)-1]
}

// gatherCounts reads counts from a Service's registry.
func gatherCounts(g prometheus.Gatherer) (counts, error) {
	mfs, err := g.Gather()
	if err != nil {
		return counts{}, err
	}
	var c counts
	for _, mf := range mfs {
		switch mf.GetName() {
		case metricCancelled:
			for _, m := range mf.GetMetric() {
				for _, l := range m.GetLabel() {
					if l.GetName() == "reason" && l.GetValue() == "timeout" {
						c.cancelled += m.GetCounter().GetValue()
					}
				}
			}
		case metricSweepCaught:
			for _, m := range mf.GetMetric() {
				c.sweepCaught += m.GetCounter().GetValue()
			}
		case metricCommands:
			for _, m := range mf.GetMetric() {
				for _, l := range m.GetLabel() {
					if l.GetName() == "result" && finalAnswer(l.GetValue()) {
						c.commandsFinal += m.GetCounter().GetValue()
					}
				}
			}
		case metricHandoffs:
			for _, m := range mf.GetMetric() {
				for _, l := range m.GetLabel() {
					if l.GetName() == "outcome" {
						c.addHandoff(l.GetValue(), m.GetCounter().GetValue())
					}
				}
			}
		case metricRetention:
			for _, m := range mf.GetMetric() {
				for _, l := range m.GetLabel() {
					if l.GetName() == "table" && l.GetValue() == "orders" {
						c.retained += m.GetCounter().GetValue()
					}
				}
			}
		case metricLateness:
			for _, m := range mf.GetMetric() {
				var h histogram
				for _, b := range m.GetHistogram().GetBucket() {
					h.bounds = append(h.bounds, b.GetUpperBound())
					h.counts = append(h.counts, float64(b.GetCumulativeCount()))
				}
				h.bounds = append(h.bounds, math.Inf(1))
				h.counts = append(h.counts, float64(m.GetHistogram().GetSampleCount()))
				c.lateness = c.lateness.plus(h)
			}
		}
	}
	return c, nil
}

// parseCounts reads counts from the Prometheus text exposition of a running
// `lapse serve` (GET /metrics). Only the few series the harness needs are
// read; anything else is skipped.
func parseCounts(r io.Reader) (counts, error) {
	var c counts
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || line[0] == '#' {
			continue
		}
		name, labels, value, err := parseSample(line)
		if err != nil {
			return c, err
		}
		switch name {
		case metricCancelled:
			if labels["reason"] == "timeout" {
				c.cancelled += value
			}
		case metricSweepCaught:
			c.sweepCaught += value
		case metricCommands:
			if finalAnswer(labels["result"]) {
				c.commandsFinal += value
			}
		case metricHandoffs:
			c.addHandoff(labels["outcome"], value)
		case metricLateness + "_bucket":
			le, err := strconv.ParseFloat(labels["le"], 64)
			if err != nil {
				return c, fmt.Errorf("bench: metrics: bucket bound %q: %w", labels["le"], err)
			}
			c.lateness.bounds = append(c.lateness.bounds, le)
			c.lateness.counts = append(c.lateness.counts, value)
		}
	}
	return c, sc.Err()
}

// parseSample splits `name{k="v",…} value [timestamp]`.
func parseSample(line string) (string, map[string]string, float64, error) {
	bad := func() (string, map[string]string, float64, error) {
		return "", nil, 0, fmt.Errorf("bench: metrics: cannot parse line %q", line)
	}
	labels := map[string]string{}
	i := strings.IndexAny(line, "{ ")
	if i < 0 {
		return bad()
	}
	name, rest := line[:i], line[i:]
	if strings.HasPrefix(rest, "{") {
		end := strings.LastIndex(rest, "}")
		if end < 0 {
			return bad()
		}
		body := rest[1:end]
		rest = rest[end+1:]
		for body != "" {
			k, v, ok := strings.Cut(body, "=")
			if !ok || len(v) < 2 || v[0] != '"' {
				return bad()
			}
			// The value ends at the first unescaped quote.
			j := 1
			for ; j < len(v) && v[j] != '"'; j++ {
				if v[j] == '\\' {
					j++
				}
			}
			if j >= len(v) {
				return bad()
			}
			val, err := strconv.Unquote(v[:j+1])
			if err != nil {
				return bad()
			}
			labels[strings.TrimSpace(k)] = val
			body = strings.TrimPrefix(strings.TrimSpace(v[j+1:]), ",")
		}
	}
	fields := strings.Fields(rest)
	if len(fields) < 1 {
		return bad()
	}
	v, err := strconv.ParseFloat(fields[0], 64)
	if err != nil {
		return bad()
	}
	return name, labels, v, nil
}
