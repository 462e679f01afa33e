package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"strings"
	"time"
)

// The protocol between the W5 parent and its two child processes: what a
// child is told (w5ChildConfig, as JSON in its environment), what it reports
// (w5ChildResult, as JSON in a file), and the parent's handle on a running
// child (w5Proc), which speaks to it through its stdin and stdout.

// w5ChildEnv carries a child's w5ChildConfig, as JSON: its presence makes the
// command a W5 child.
const w5ChildEnv = "OUTBOX_BENCH_W5_CHILD"

// w5ChildConfig is what a W5 child is told.
type w5ChildConfig struct {
	DB         string  `json:"db"`
	SQLitePath string  `json:"sqlite_path,omitempty"`
	Table      string  `json:"table"`
	AggTable   string  `json:"agg_table"`
	Ordered    bool    `json:"ordered"`
	Txs        int     `json:"txs"`
	Writers    int     `json:"writers"`
	Keys       int     `json:"keys"`
	Fail       float64 `json:"fail"`
	Hot        float64 `json:"hot"`
	Seed       uint64  `json:"seed"`
	Out        string  `json:"out"`
	// Profile, when not "", is the prefix of the CPU, block and mutex
	// profiles the child writes.
	Profile string `json:"profile,omitempty"`
	// Trace: time every statement of every transaction (see w5trace.go).
	Trace bool `json:"trace,omitempty"`
	// NoCounter: the transactions do not lock and add to their aggregate's
	// counter; the events are numbered by the store's seq (ordered runs
	// only) and the unordered baseline is not checked for order.
	NoCounter bool `json:"no_counter,omitempty"`

	Workers      int           `json:"workers"`
	HotQueue     int           `json:"hot_queue"`
	ColdQueue    int           `json:"cold_queue"`
	PollBatch    int           `json:"poll_batch"`
	PollMaxBatch int           `json:"poll_max_batch"`
	PollInterval time.Duration `json:"poll_interval"`
	BusyInterval time.Duration `json:"busy_interval"`
	DoneBatch    int           `json:"done_batch"`
	DoneLinger   time.Duration `json:"done_linger"`
	NoWake       bool          `json:"no_wake"`
}

// w5Delivery is one listener call of a child.
type w5Delivery struct {
	ID     string `json:"id"`
	Key    string `json:"k"`
	N      int64  `json:"n"`
	Start  int64  `json:"s"` // Unix ns
	Finish int64  `json:"f"` // Unix ns
	OK     bool   `json:"ok"`
}

// w5Durations are the durations of one kind of store call in a child.
type w5Durations struct {
	Ns    []int64 `json:"ns"`
	Rows  int     `json:"rows"`
	Fails int     `json:"fails"`
}

func w5DurationsOf(s *opStats) w5Durations {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := w5Durations{Ns: make([]int64, len(s.durs)), Rows: s.rows, Fails: s.fails}
	for i, d := range s.durs {
		out.Ns[i] = int64(d)
	}
	return out
}

// add appends o's durations to w's.
func (w *w5Durations) add(o w5Durations) {
	w.Ns = append(w.Ns, o.Ns...)
	w.Rows += o.Rows
	w.Fails += o.Fails
}

// sorted returns the durations, sorted.
func (w w5Durations) sorted() []time.Duration {
	out := make([]time.Duration, len(w.Ns))
	for i, ns := range w.Ns {
		out[i] = time.Duration(ns)
	}
	slices.Sort(out)
	return out
}

func (w w5Durations) addTo(s *opStats) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, ns := range w.Ns {
		s.durs = append(s.durs, time.Duration(ns))
	}
	s.calls += len(w.Ns)
	s.rows += w.Rows
	s.fails += w.Fails
}

// w5ChildResult is what a child writes to its Out file when it stops.
type w5ChildResult struct {
	Deliveries            []w5Delivery `json:"deliveries"`
	Inserts, Claims, Done w5Durations
	Txs                   int         `json:"txs"`
	Events                int         `json:"events"`
	Retries               int         `json:"retries"`
	Hot                   int64       `json:"hot"`
	StoreErrors           int64       `json:"store_errors"`
	Trace                 []w5TxTrace `json:"trace,omitempty"`
	// Per event recorded DONE by this process after its successful
	// delivery here: from the delivery's end until the DONE call that
	// recorded it started, and that call's duration (ns).
	DoneWait  []int64 `json:"done_wait_ns"`
	DoneWrite []int64 `json:"done_write_ns"`
	// Commits holds when the transaction of each event this process wrote
	// committed (Unix ns).
	Commits map[string]int64 `json:"commits"`
}

// w5Proc is a running W5 child.
type w5Proc struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	lines  chan string // its stdout, closed at EOF
	stderr bytes.Buffer
	out    string
	exited bool
}

func startW5Child(exe string, cc w5ChildConfig) (*w5Proc, error) {
	js, err := json.Marshal(cc)
	if err != nil {
		return nil, err
	}
	p := &w5Proc{cmd: exec.Command(exe), lines: make(chan string, 16), out: cc.Out}
	p.cmd.Env = append(os.Environ(), w5ChildEnv+"="+string(js))
	p.cmd.Stderr = &p.stderr
	if p.stdin, err = p.cmd.StdinPipe(); err != nil {
		return nil, err
	}
	stdout, err := p.cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := p.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start W5 child: %w", err)
	}
	go func() { // owned: ends at the child's EOF, which finish and kill wait for
		defer close(p.lines)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			p.lines <- sc.Text()
		}
	}()
	return p, nil
}

// expect returns the next line of the child's stdout starting with prefix,
// skipping others.
func (p *w5Proc) expect(prefix string, timeout time.Duration) (string, error) {
	t := time.NewTimer(timeout)
	defer t.Stop()
	for {
		select {
		case l, ok := <-p.lines:
			if !ok {
				return "", fmt.Errorf("W5 child exited before printing %q; stderr:\n%s", prefix, p.errText())
			}
			if strings.HasPrefix(l, prefix) {
				return l, nil
			}
		case <-t.C:
			return "", fmt.Errorf("W5 child printed no %q within %s", prefix, timeout)
		}
	}
}

// errText returns the child's stderr once it has exited.
func (p *w5Proc) errText() string {
	p.wait()
	return p.stderr.String()
}

// wait drains stdout and reaps the child.
func (p *w5Proc) wait() {
	if p.exited {
		return
	}
	for range p.lines {
	}
	_ = p.cmd.Wait()
	p.exited = true
}

// finish tells the child to stop (its stdin closes), waits for it, and
// returns its result and CPU time.
func (p *w5Proc) finish(timeout time.Duration) (w5ChildResult, float64, error) {
	var res w5ChildResult
	_ = p.stdin.Close()
	if _, err := p.expect("stopped", timeout); err != nil {
		return res, 0, err
	}
	p.wait()
	if !p.cmd.ProcessState.Success() {
		return res, 0, fmt.Errorf("W5 child: %s; stderr:\n%s", p.cmd.ProcessState, p.stderr.String())
	}
	b, err := os.ReadFile(p.out)
	if err != nil {
		return res, 0, err
	}
	if err := json.Unmarshal(b, &res); err != nil {
		return res, 0, fmt.Errorf("W5 child result: %w", err)
	}
	cpu := (p.cmd.ProcessState.UserTime() + p.cmd.ProcessState.SystemTime()).Seconds()
	return res, cpu, nil
}

// kill ends a child that is still running.
func (p *w5Proc) kill() {
	if p.exited {
		return
	}
	_ = p.cmd.Process.Kill()
	_ = p.stdin.Close()
	p.wait()
}
