package web

import (
	"math"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// Cancel lateness over the last hour comes from the service's own
// Prometheus histogram, lapse_cancel_lateness_seconds (cancelled_at −
// cancel_after of every timeout cancel this instance made), sampled every
// Options.SampleEvery into a ring an hour long. Why not from the orders
// table: percentiles need every cancel of the hour (3.6 M index entries an
// hour at 1,000 cancels/s), while the histogram costs nothing to read at any
// rate or table size. What it gives up: it is this instance's cancels only,
// since the dashboard started sampling, at the histogram's bucket
// resolution (p50/p99 interpolated within a bucket, as histogram_quantile
// does). A fleet-wide view is Prometheus's: the same metric, summed.

const latenessMetric = "lapse_cancel_lateness_seconds"

type histSample struct {
	at      time.Time
	count   uint64
	buckets []uint64 // cumulative, per upper bound
}

type sampler struct {
	g      prometheus.Gatherer
	window time.Duration

	mu      sync.Mutex
	bounds  []float64
	samples []histSample // oldest first, spanning at most window (+ one)
}

func newSampler(g prometheus.Gatherer) *sampler {
	return &sampler{g: g, window: time.Hour}
}

// read gathers the histogram now; ok=false if the registry has none.
func (s *sampler) read(now time.Time) (histSample, []float64, bool) {
	mfs, err := s.g.Gather()
	if err != nil {
		return histSample{}, nil, false
	}
	for _, mf := range mfs {
		if mf.GetName() != latenessMetric || mf.GetType() != dto.MetricType_HISTOGRAM || len(mf.GetMetric()) == 0 {
			continue
		}
		h := mf.GetMetric()[0].GetHistogram()
		hs := histSample{at: now, count: h.GetSampleCount()}
		var bounds []float64
		for _, b := range h.GetBucket() {
			bounds = append(bounds, b.GetUpperBound())
			hs.buckets = append(hs.buckets, b.GetCumulativeCount())
		}
		return hs, bounds, true
	}
	return histSample{}, nil, false
}

// sample records the histogram as it is now.
func (s *sampler) sample(now time.Time) {
	hs, bounds, ok := s.read(now)
	if !ok {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.bounds = bounds
	s.samples = append(s.samples, hs)
	// Keep one sample older than the window: the base of its first minute.
	for len(s.samples) > 2 && now.Sub(s.samples[1].at) > s.window {
		s.samples = s.samples[1:]
	}
}

// latenessView is the lateness panel: p50 and p99 per minute over the last
// hour (NaN where the minute had no cancel or no samples), and the
// histogram of the whole hour (per bucket, not cumulative).
type latenessView struct {
	Minutes  []int64 // Unix seconds
	P50, P99 []float64
	Bounds   []float64
	Hist     []uint64
	Since    time.Time // the oldest sample the hour is measured from
	Count    uint64
}

// view computes the panel for the 60 minutes ending with now's minute,
// taking a fresh reading as the newest point.
func (s *sampler) view(now time.Time) latenessView {
	s.sample(now)
	s.mu.Lock()
	samples := append([]histSample(nil), s.samples...)
	bounds := s.bounds
	s.mu.Unlock()
	v := latenessView{Bounds: bounds}
	end := now.Truncate(time.Minute).Add(time.Minute)
	// at returns the last sample taken at or before t (nil if none).
	at := func(t time.Time) *histSample {
		var found *histSample
		for i := range samples {
			if samples[i].at.After(t) {
				break
			}
			found = &samples[i]
		}
		return found
	}
	for m := end.Add(-60 * time.Minute); m.Before(end); m = m.Add(time.Minute) {
		v.Minutes = append(v.Minutes, m.Unix())
		from, to := at(m), at(m.Add(time.Minute))
		if from == nil && len(samples) > 0 && samples[0].at.Before(m.Add(time.Minute)) {
			from = &samples[0]
		}
		p50, p99 := math.NaN(), math.NaN()
		if from != nil && to != nil && to.count > from.count {
			d := diff(*to, *from)
			p50, p99 = quantile(0.5, bounds, d), quantile(0.99, bounds, d)
		}
		v.P50, v.P99 = append(v.P50, p50), append(v.P99, p99)
	}
	if len(samples) > 0 {
		first, last := samples[0], samples[len(samples)-1]
		if now.Sub(first.at) > s.window && len(samples) > 1 {
			first = samples[1]
		}
		v.Since, v.Count = first.at, last.count-first.count
		cum := diff(last, first)
		v.Hist = make([]uint64, len(cum))
		var prev uint64
		for i, c := range cum {
			v.Hist[i], prev = c-prev, c
		}
	}
	return v
}

func diff(a, b histSample) []uint64 {
	out := make([]uint64, len(a.buckets))
	for i := range a.buckets {
		if i < len(b.buckets) && a.buckets[i] >= b.buckets[i] {
			out[i] = a.buckets[i] - b.buckets[i]
		}
	}
	return out
}

// quantile interpolates q within cumulative bucket counts, as Prometheus's
// histogram_quantile does (the lowest bucket from 0; past the last bound,
// the last bound).
func quantile(q float64, bounds []float64, cum []uint64) float64 {
	if len(cum) == 0 {
		return math.NaN()
	}
	total := cum[len(cum)-1]
	if total == 0 {
		return math.NaN()
	}
	rank := q * float64(total)
	lower, prev := 0.0, uint64(0)
	for i, c := range cum {
		if float64(c) >= rank {
			inBucket := float64(c - prev)
			if inBucket == 0 {
				return bounds[i]
			}
			return lower + (bounds[i]-lower)*(rank-float64(prev))/inBucket
		}
		lower, prev = bounds[i], c
	}
	return bounds[len(bounds)-1]
}
