package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os/exec"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lapsehq/lapse/timer"
	lamqp "github.com/lapsehq/lapse/timer/amqp"
)

// million is `compare million`: N timers pending on RabbitMQ at once, far
// in the future, on a prefix of the run's own. It reports how fast they were
// published (Schedule from many goroutines, as lapse serve does for the
// orders it creates, or ScheduleMany, as a seed does) and what they cost the
// broker: its memory (rabbitmqctl status, before and after, per category)
// and the disk under its data directory. The prefix is deleted afterwards,
// with every timer. rabbitmqctl must reach the broker (run as root or as the
// rabbitmq user), on this machine.
func million(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("compare million", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var (
		n         = fs.Int("timers", 1_000_000, "timers to leave pending")
		amqpURL   = fs.String("amqp", envOr("LAPSE_BENCH_AMQP", "amqp://guest:guest@127.0.0.1:5672/"), "RabbitMQ, on this machine")
		queueType = fs.String("queue-type", lamqp.QueueClassic, "classic or quorum")
		via       = fs.String("via", "schedule", "schedule: Schedule calls from --concurrency goroutines; many: ScheduleMany, 10,000 a call (a seed)")
		conc      = fs.Int("concurrency", 256, "goroutines calling Schedule")
		delay     = fs.Duration("delay", time.Hour, "how far ahead the timers are due (they all wait in one level: 1h is level 15's 54.6 min first)")
		dataDir   = fs.String("data-dir", "/var/lib/rabbitmq/mnesia", "the broker's data directory, whose size is reported (empty: not read)")
		asJSON    = fs.Bool("json", false, "print the result as JSON")
	)
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *n < 1 || *conc < 1 || *delay <= 0 || (*via != "schedule" && *via != "many") {
		return errors.New("million: want --timers and --concurrency at least 1, --delay above 0, --via schedule or many")
	}
	prefix := "lapsecmp-" + runID() + "-million"
	cfg := lamqp.Config{Prefix: prefix, QueueType: *queueType}
	defer func() {
		cleanup, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Minute)
		defer cancel()
		if err := lamqp.DeleteTopology(cleanup, *amqpURL, cfg); err != nil {
			fmt.Fprintf(stderr, "million: delete the prefix %s: %v (delete its queues by hand)\n", prefix, err)
		}
	}()
	s, err := lamqp.Open(ctx, *amqpURL, cfg)
	if err != nil {
		return err
	}
	defer s.Close()

	before, err := brokerMemory(ctx)
	if err != nil {
		return err
	}
	diskBefore := dirMB(*dataDir)
	fmt.Fprintf(stderr, "million: publishing %d timers (%s, %s queues) on prefix %s …\n", *n, *via, *queueType, prefix)
	due := time.Now().Add(*delay)
	start := time.Now()
	var failed atomic.Int64
	switch *via {
	case "many":
		const chunk = 10_000
		for i := 0; i < *n; i += chunk {
			ts := make([]timer.Timer, 0, chunk)
			for j := i; j < min(i+chunk, *n); j++ {
				ts = append(ts, timer.Timer{Key: "m-" + strconv.Itoa(j), Due: due})
			}
			if err := s.ScheduleMany(ctx, ts); err != nil {
				return err
			}
		}
	default:
		var next atomic.Int64
		var wg sync.WaitGroup
		for range *conc {
			wg.Go(func() {
				for {
					i := next.Add(1) - 1
					if i >= int64(*n) || ctx.Err() != nil {
						return
					}
					if err := s.Schedule(ctx, "m-"+strconv.FormatInt(i, 10), due); err != nil {
						failed.Add(1)
					}
				}
			})
		}
		wg.Wait()
	}
	took := time.Since(start)
	if err := ctx.Err(); err != nil {
		return err
	}
	// Let the queue processes settle (a classic queue pages messages out,
	// a quorum queue writes its log) before reading the memory.
	var after brokerMem
	var held int
	for deadline := time.Now().Add(2 * time.Minute); ; {
		held = queueMessages(ctx, prefix)
		if held >= *n-int(failed.Load()) || time.Now().After(deadline) {
			break
		}
		time.Sleep(time.Second) // polling the broker's count; bounded by the deadline
	}
	if after, err = brokerMemory(ctx); err != nil {
		return err
	}
	res := millionResult{
		Timers: *n, QueueType: *queueType, Via: *via, Failed: int(failed.Load()), Held: held,
		PublishSec: took.Seconds(), PerSec: float64(*n) / took.Seconds(),
		MemBefore: before, MemAfter: after,
		BytesPerTimer: float64(after.Total-before.Total) / float64(*n),
		DiskMBBefore:  diskBefore, DiskMBAfter: dirMB(*dataDir),
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(res)
	}
	fmt.Fprintf(stdout, "%d timers (%s queues, %s): published in %.1f s = %.0f timers/s, %d failed; %d held by the prefix's queues\n",
		*n, *queueType, *via, res.PublishSec, res.PerSec, res.Failed, res.Held)
	fmt.Fprintf(stdout, "broker memory (rabbitmqctl status, erlang total): %.1f MiB before, %.1f MiB after: %.0f bytes per timer\n",
		mib(before.Total), mib(after.Total), res.BytesPerTimer)
	for _, k := range []string{"queue_procs", "quorum_queue_procs", "quorum_ets", "binary", "msg_index", "other_system"} {
		fmt.Fprintf(stdout, "  %-20s %8.1f -> %8.1f MiB\n", k, mib(before.Parts[k]), mib(after.Parts[k]))
	}
	if diskBefore >= 0 {
		fmt.Fprintf(stdout, "disk under %s: %d MB before, %d MB after\n", *dataDir, res.DiskMBBefore, res.DiskMBAfter)
	}
	return nil
}

type millionResult struct {
	Timers        int       `json:"timers"`
	QueueType     string    `json:"queue_type"`
	Via           string    `json:"via"`
	Failed        int       `json:"failed"`
	Held          int       `json:"held"`
	PublishSec    float64   `json:"publish_s"`
	PerSec        float64   `json:"timers_per_s"`
	MemBefore     brokerMem `json:"memory_before"`
	MemAfter      brokerMem `json:"memory_after"`
	BytesPerTimer float64   `json:"bytes_per_timer"`
	DiskMBBefore  int       `json:"disk_mb_before"`
	DiskMBAfter   int       `json:"disk_mb_after"`
}

// brokerMem is the broker's memory breakdown, in bytes.
type brokerMem struct {
	Total int64            `json:"total"` // the Erlang VM's own count (memory.total.erlang)
	RSS   int64            `json:"rss"`
	Parts map[string]int64 `json:"parts"`
}

func brokerMemory(ctx context.Context) (brokerMem, error) {
	out, err := exec.CommandContext(ctx, "rabbitmqctl", "status", "--formatter", "json").Output()
	if err != nil {
		return brokerMem{}, fmt.Errorf("rabbitmqctl status: %w", err)
	}
	var st struct {
		Memory map[string]json.RawMessage `json:"memory"`
	}
	if err := json.Unmarshal(out, &st); err != nil {
		return brokerMem{}, fmt.Errorf("rabbitmqctl status: %w", err)
	}
	m := brokerMem{Parts: map[string]int64{}}
	for k, raw := range st.Memory {
		if k == "total" {
			var t struct{ Erlang, RSS int64 }
			_ = json.Unmarshal(raw, &t)
			m.Total, m.RSS = t.Erlang, t.RSS
			continue
		}
		var v int64
		if json.Unmarshal(raw, &v) == nil {
			m.Parts[k] = v
		}
	}
	return m, nil
}

// queueMessages is how many messages the prefix's queues hold.
func queueMessages(ctx context.Context, prefix string) int {
	out, err := exec.CommandContext(ctx, "rabbitmqctl", "list_queues", "-q", "--formatter", "json", "name", "messages").Output()
	if err != nil {
		return -1
	}
	var qs []struct {
		Name     string `json:"name"`
		Messages int    `json:"messages"`
	}
	if json.Unmarshal(out, &qs) != nil {
		return -1
	}
	total := 0
	for _, q := range qs {
		if len(q.Name) > len(prefix) && q.Name[:len(prefix)] == prefix {
			total += q.Messages
		}
	}
	return total
}

// dirMB is the size of dir in megabytes (du -sm), -1 when unknown.
func dirMB(dir string) int {
	if dir == "" {
		return -1
	}
	out, err := exec.Command("du", "-sm", dir).Output()
	if err != nil {
		return -1
	}
	var mb int
	if _, err := fmt.Sscan(string(out), &mb); err != nil {
		return -1
	}
	return mb
}

func mib(b int64) float64 { return float64(b) / (1 << 20) }
