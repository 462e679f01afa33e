package testbroker

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// NATSServerBinary returns the path of the nats-server binary, or skips the
// test (fails it under OUTBOX_REQUIRE_DBS=1).
func NATSServerBinary(t testing.TB) string {
	t.Helper()
	if p := os.Getenv(NATSServerEnv); p != "" {
		return p
	}
	if p, err := exec.LookPath("nats-server"); err == nil {
		return p
	}
	if _, err := os.Stat(defaultNATSPath); err == nil {
		return defaultNATSPath
	}
	SkipOrFail(t, "private NATS server tests: install nats-server (Debian package nats-server) or set %s", NATSServerEnv)
	return ""
}

// NATSNode is a nats-server process of the test's own, with JetStream, on
// loopback ports. Stop and Kill end it; Start starts it again on the same
// ports and store directory, as a restarted server would be.
type NATSNode struct {
	Name     string
	Port     int // client port
	Cluster  int // cluster port, 0 for a single node
	StoreDir string
	bin      string
	conf     string
	log      string
	cmd      *exec.Cmd
	done     chan error
}

// URL returns the node's client URL.
func (n *NATSNode) URL() string { return fmt.Sprintf("nats://127.0.0.1:%d", n.Port) }

// StartNATS starts one JetStream node on a free loopback port; it is
// killed when the test ends.
func StartNATS(t testing.TB) *NATSNode {
	t.Helper()
	nodes := startNodes(t, 1)
	return nodes[0]
}

// StartNATSCluster starts a JetStream cluster of size nodes on free
// loopback ports (client and cluster ports); they are killed when the test
// ends. It returns once every node accepts connections; the caller waits
// for JetStream's meta leader (a stream create succeeds) itself.
func StartNATSCluster(t testing.TB, size int) []*NATSNode {
	t.Helper()
	return startNodes(t, size)
}

func startNodes(t testing.TB, size int) []*NATSNode {
	t.Helper()
	bin := NATSServerBinary(t)
	dir := t.TempDir()
	nodes := make([]*NATSNode, size)
	for i := range nodes {
		n := &NATSNode{Name: fmt.Sprintf("n%d", i+1), Port: freePort(t), bin: bin}
		if size > 1 {
			n.Cluster = freePort(t)
		}
		n.StoreDir = filepath.Join(dir, n.Name)
		n.conf = filepath.Join(dir, n.Name+".conf")
		n.log = filepath.Join(dir, n.Name+".log")
		nodes[i] = n
	}
	for _, n := range nodes {
		var b strings.Builder
		fmt.Fprintf(&b, "server_name: %s\nlisten: 127.0.0.1:%d\n", n.Name, n.Port)
		fmt.Fprintf(&b, "jetstream { store_dir: %q }\n", n.StoreDir)
		if size > 1 {
			var routes []string
			for _, o := range nodes {
				if o != n {
					routes = append(routes, fmt.Sprintf("nats-route://127.0.0.1:%d", o.Cluster))
				}
			}
			fmt.Fprintf(&b, "cluster { name: outboxtest, listen: 127.0.0.1:%d, routes: [%s] }\n", n.Cluster, strings.Join(routes, ", "))
		}
		if err := os.WriteFile(n.conf, []byte(b.String()), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	for _, n := range nodes {
		if err := n.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { n.Kill() })
	}
	for _, n := range nodes {
		if err := n.WaitReady(15 * time.Second); err != nil {
			t.Fatal(err)
		}
	}
	return nodes
}

// Start starts the node's process (again).
func (n *NATSNode) Start() error {
	if n.cmd != nil {
		return fmt.Errorf("nats node %s: already running", n.Name)
	}
	cmd := exec.Command(n.bin, "-c", n.conf, "-l", n.log)
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start nats-server %s: %w", n.Name, err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	n.cmd, n.done = cmd, done
	return nil
}

// WaitReady waits until the node accepts TCP connections on its client port.
func (n *NATSNode) WaitReady(limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for {
		c, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", n.Port), time.Second)
		if err == nil {
			_ = c.Close()
			return nil
		}
		if time.Now().After(deadline) {
			logText, _ := os.ReadFile(n.log)
			return fmt.Errorf("nats node %s not ready after %s: %w\n%s", n.Name, limit, err, logText)
		}
		select {
		case err := <-n.done:
			n.done <- err
			logText, _ := os.ReadFile(n.log)
			return fmt.Errorf("nats node %s exited: %v\n%s", n.Name, err, logText)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// Kill ends the process with SIGKILL (a crash) and waits for it; it does
// nothing if the node is not running.
func (n *NATSNode) Kill() { n.signal(syscall.SIGKILL) }

// Stop ends the process with SIGTERM (a clean shutdown) and waits for it.
func (n *NATSNode) Stop() { n.signal(syscall.SIGTERM) }

func (n *NATSNode) signal(sig syscall.Signal) {
	if n.cmd == nil {
		return
	}
	if err := n.cmd.Process.Signal(sig); err != nil && !errors.Is(err, os.ErrProcessDone) {
		_ = n.cmd.Process.Kill()
	}
	<-n.done
	n.cmd, n.done = nil, nil
}

func freePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}
