package main

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/outboxkit/outbox/core"
)

// served is an "outboxctl serve" subprocess and the URL it listens on.
type served struct {
	url    string
	cmd    *exec.Cmd
	mu     sync.Mutex
	stderr bytes.Buffer // what it printed after the listening line
	wait   chan struct{}
}

var listeningRE = regexp.MustCompile(`on (http://\S+/)`)

// serve starts outboxctl serve on tg with args and waits for the line that
// says where it listens. The process is interrupted when the test ends.
func (tg target) serve(t *testing.T, args ...string) *served {
	t.Helper()
	args = append([]string{"--dsn", tg.dsn, "--table", tg.Table, "serve", "--addr", "127.0.0.1:0"}, args...)
	cmd := exec.Command(binary, args...)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME"), "GORACE=atexit_sleep_ms=0 halt_on_error=1"}
	pipe, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	s := &served{cmd: cmd, wait: make(chan struct{})}
	lines := bufio.NewReader(pipe)
	first, err := lines.ReadString('\n')
	for err == nil && strings.Contains(first, "warning:") {
		first, err = lines.ReadString('\n')
	}
	m := listeningRE.FindStringSubmatch(first)
	if m == nil {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		t.Fatalf("outboxctl serve printed %q (%v), not where it listens", first, err)
	}
	s.url = m[1]
	go func() {
		defer close(s.wait)
		b, _ := io.ReadAll(lines)
		s.mu.Lock()
		s.stderr.Write(b)
		s.mu.Unlock()
		_ = cmd.Wait()
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-s.wait
	})
	return s
}

// stop interrupts the server and returns its exit code and what it printed.
func (s *served) stop(t *testing.T) (int, string) {
	t.Helper()
	if err := s.cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	select {
	case <-s.wait:
	case <-time.After(30 * time.Second):
		t.Fatal("outboxctl serve did not stop within 30s of SIGINT")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cmd.ProcessState.ExitCode(), s.stderr.String()
}

func httpGet(t *testing.T, u string) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func TestServe(t *testing.T) {
	forEach(t, func(t *testing.T, tg target) {
		seed(t, tg,
			seedRow{id: "n1", eventType: "A", status: core.StatusNew, at: now.Add(-90 * time.Second)},
			seedRow{id: "d1", eventType: "A", status: core.StatusDead, at: now},
			seedRow{id: "d2", eventType: "B", status: core.StatusDead, at: now},
		)
		s := tg.serve(t)
		code, body := httpGet(t, s.url+"dead?type=A")
		if code != http.StatusOK || !strings.Contains(body, `data-id="d1"`) || strings.Contains(body, `data-id="d2"`) ||
			!strings.Contains(body, "read-only") {
			t.Errorf("GET dead?type=A = %d:\n%s", code, body)
		}
		if code, body := httpGet(t, s.url+"event?id=d1"); code != http.StatusOK || strings.Contains(body, "payload-d1") {
			t.Errorf("event page = %d, shows the payload: %v", code, strings.Contains(body, "payload-d1"))
		}
		resp, err := http.PostForm(s.url+"replay", url.Values{"id": {"d1"}})
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusForbidden || status(t, tg, "d1") != "DEAD" {
			t.Errorf("POST replay on a read-only console = %d, d1 %s", resp.StatusCode, status(t, tg, "d1"))
		}
		if code, out := s.stop(t); code != exitOK || !strings.Contains(out, "console stopped") {
			t.Errorf("after SIGINT: exit %d, stderr %q", code, out)
		}
	})
}

func TestServeFlags(t *testing.T) {
	tg := open(t, "sqlite")
	seed(t, tg, seedRow{id: "d1", eventType: "A", status: core.StatusDead, at: now})
	s := tg.serve(t, "--allow-writes", "--show-payloads")
	code, body := httpGet(t, s.url+"event?id=d1")
	if code != http.StatusOK || !strings.Contains(body, "payload-d1") || !strings.Contains(body, "Replay this event") {
		t.Errorf("event page with --allow-writes --show-payloads = %d:\n%s", code, body)
	}
	s.stop(t)

	r := tg.run(t, "serve", "--addr", "nonsense").want(t, exitUsage)
	mustContain(t, r.stderr, `serve: --addr "nonsense"`)
	tg.run(t, "serve", "extra").want(t, exitUsage)
	mustContain(t, tg.run(t, "help", "serve").want(t, exitOK).stdout, "NO AUTHENTICATION", "127.0.0.1")
}
