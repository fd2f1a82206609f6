package main

import (
	"fmt"
	"strings"
)

// oneLine is a result as a progress line.
func oneLine(r result) string {
	if r.Delivered == 0 && r.Error != "" {
		return "error: " + r.Error
	}
	s := fmt.Sprintf("%d/s, lateness p50 %s p99 %s max %s ms, early %d, dup %d, missing %d, cpu %.1fs",
		round(r.TimersPerSec), num(r.LateP50Ms), num(r.LateP99Ms), num(r.LateMaxMs), r.Early, r.Duplicates, r.Missing, r.CPUSec)
	if r.Error != "" {
		s += " (" + r.Error + ")"
	}
	return s
}

// markdown is the report as a markdown table with its notes.
func markdown(rep report) string {
	var b strings.Builder
	p := rep.Params
	fmt.Fprintf(&b, "%d timers per system, due evenly over %s, each scheduled %s before it is due", p.Timers, p.Over, p.Lead)
	if p.OverSec > 0 {
		fmt.Fprintf(&b, " (%s scheduled and due per second)", rateOf(p))
	}
	fmt.Fprintf(&b, "; %d scheduling goroutines; %d CPUs; %s", p.Concurrency, p.CPUs, p.GoVersion)
	if p.Redis != "" {
		fmt.Fprintf(&b, "; Redis %s", p.Redis)
	}
	if p.Postgres != "" {
		fmt.Fprintf(&b, "; PostgreSQL %s", p.Postgres)
	}
	fmt.Fprintf(&b, "; run %s at %s.\n\n", p.Run, p.Started)

	burst := p.OverSec <= 0 // all due at once: how fast each system took them in is worth a column
	b.WriteString("| system | configuration | timers/s | lateness p50 / p99 / max (ms) | early (most early, ms) | duplicates | missing | CPU s, process | CPU s, server |")
	if burst {
		b.WriteString(" scheduled/s |")
	}
	b.WriteString("\n| --- | --- | ---: | --- | --- | ---: | ---: | ---: | ---: |")
	if burst {
		b.WriteString(" ---: |")
	}
	b.WriteString("\n")
	for _, r := range rep.Results {
		if r.Delivered == 0 {
			fmt.Fprintf(&b, "| %s | %s | — | — | — | — | %d | %.1f | %s |", r.Name, r.Config, r.Missing, r.CPUSec, serverCPU(r))
		} else {
			early := fmt.Sprint(r.Early)
			if r.Early > 0 {
				early = fmt.Sprintf("%d (%s)", r.Early, num(r.EarliestMs))
			}
			fmt.Fprintf(&b, "| %s | %s | %s | %s / %s / %s | %s | %d | %d | %.1f | %s |",
				r.Name, r.Config, thousands(round(r.TimersPerSec)), num(r.LateP50Ms), num(r.LateP99Ms), num(r.LateMaxMs),
				early, r.Duplicates, r.Missing, r.CPUSec, serverCPU(r))
		}
		if burst {
			if r.SchedSec > 0 && r.SchedFailed == 0 {
				fmt.Fprintf(&b, " %s |", thousands(round(float64(p.Timers)/r.SchedSec)))
			} else {
				b.WriteString(" — |")
			}
		}
		b.WriteString("\n")
	}
	b.WriteString("\n")
	notes := append([]string(nil), rep.Skipped...)
	for _, r := range rep.Results {
		if r.Error != "" {
			notes = append(notes, fmt.Sprintf("%s: %s.", r.Name, r.Error))
		}
		if r.ScheduledLate > 0 {
			notes = append(notes, fmt.Sprintf("%s: %d timers were scheduled only after their due time (the scheduling calls fell behind); their lateness counts from the due time.", r.Name, r.ScheduledLate))
		}
		if over := p.OverSec; over > 0 && r.SchedFailed == 0 && r.SchedSec > over*1.1+1 {
			notes = append(notes, fmt.Sprintf("%s: scheduling took %.1f s for a %s window: the schedule calls could not keep up with %s per second (about %s per second).",
				r.Name, r.SchedSec, p.Over, rateOf(p), thousands(round(float64(p.Timers)/r.SchedSec))))
		}
		if r.Unknown > 0 {
			notes = append(notes, fmt.Sprintf("%s: %d deliveries of keys this run never scheduled.", r.Name, r.Unknown))
		}
	}
	for _, n := range notes {
		b.WriteString("- " + n + "\n")
	}
	if len(notes) > 0 {
		b.WriteString("\n")
	}
	b.WriteString("How timers are scheduled: ")
	seen := map[string]bool{}
	var ins []string
	for _, r := range rep.Results {
		base := strings.TrimSuffix(r.Name, "-tuned")
		if !seen[base] && r.Insert != "" {
			seen[base] = true
			ins = append(ins, base+": "+r.Insert)
		}
	}
	b.WriteString(strings.Join(ins, "; ") + ".\n")
	return b.String()
}

func serverCPU(r result) string {
	if r.ServerCPUSec < 0 {
		return "—"
	}
	return fmt.Sprintf("%.1f (%s)", r.ServerCPUSec, r.Server)
}

func rateOf(p params) string {
	if p.OverSec <= 0 {
		return "?"
	}
	return thousands(round(float64(p.Timers) / p.OverSec))
}

func round(f float64) int64 { return int64(f + 0.5) }

// num prints milliseconds: whole above 10, one decimal below.
func num(v float64) string {
	if v >= 10 || v <= -10 {
		return fmt.Sprintf("%.0f", v)
	}
	return fmt.Sprintf("%.1f", v)
}

func thousands(n int64) string {
	s := fmt.Sprint(n)
	if n < 0 {
		return s
	}
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	return b.String()
}
