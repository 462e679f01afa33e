package reliability

import (
	"encoding/binary"
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// tcpProxy sits between a connection pool and a database server on
// 127.0.0.1 and makes real network failures on demand: it can cut every
// connection it carries, refuse new ones (accept and close at once, as a
// server going down does), or stall the ones it carries (stop relaying
// without closing, as a network partition without resets does).
type tcpProxy struct {
	ln     net.Listener
	target string
	// mysql: read each new server connection's greeting to learn its
	// thread id (see ThreadIDs).
	mysql bool

	mu       sync.Mutex
	refusing bool
	links    map[*link]struct{}
	closed   bool

	accepted, refused atomic.Int64
	wg                sync.WaitGroup // the accept loop and every relay goroutine
}

// link is one proxied connection.
type link struct {
	client, server net.Conn
	threadID       uint32 // the MySQL server's id of the session; 0 if unknown
	stalled        atomic.Bool
	done           chan struct{}
	once           sync.Once
}

func (l *link) close() {
	l.once.Do(func() {
		close(l.done)
		_ = l.client.Close()
		_ = l.server.Close()
	})
}

// newProxy starts a proxy to target (host:port); mysql says the target is a
// MySQL server (see ThreadIDs). It is closed, and every goroutine of it
// reaped, when the test ends.
func newProxy(t *testing.T, target string, mysql bool) *tcpProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &tcpProxy{ln: ln, target: target, mysql: mysql, links: map[*link]struct{}{}}
	p.wg.Go(p.accept)
	t.Cleanup(p.close)
	return p
}

// Addr returns the proxy's host:port.
func (p *tcpProxy) Addr() string { return p.ln.Addr().String() }

func (p *tcpProxy) accept() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return // closed
		}
		p.mu.Lock()
		refusing := p.refusing || p.closed
		p.mu.Unlock()
		if refusing {
			p.refused.Add(1)
			_ = c.Close()
			continue
		}
		s, err := net.DialTimeout("tcp", p.target, 5*time.Second)
		if err != nil {
			_ = c.Close()
			continue
		}
		l := &link{client: c, server: s, done: make(chan struct{})}
		if p.mysql {
			if l.threadID, err = relayGreeting(s, c); err != nil {
				l.close()
				continue
			}
		}
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			l.close()
			return
		}
		p.links[l] = struct{}{}
		p.mu.Unlock()
		p.accepted.Add(1)
		p.wg.Go(func() { p.relay(l, l.client, l.server) })
		p.wg.Go(func() { p.relay(l, l.server, l.client) })
	}
}

// relay copies src to dst until either side closes. A stalled link swallows
// what it reads and waits for its end.
func (p *tcpProxy) relay(l *link, src, dst net.Conn) {
	defer func() {
		l.close()
		p.mu.Lock()
		delete(p.links, l)
		p.mu.Unlock()
	}()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if l.stalled.Load() {
			<-l.done
			return
		}
		if n > 0 {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

func (p *tcpProxy) snapshot() []*link {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]*link, 0, len(p.links))
	for l := range p.links {
		out = append(out, l)
	}
	return out
}

// Cut closes every connection the proxy carries and returns how many.
func (p *tcpProxy) Cut() int {
	ls := p.snapshot()
	for _, l := range ls {
		l.close()
	}
	return len(ls)
}

// SetRefusing makes the proxy refuse (true) or accept (false) new
// connections.
func (p *tcpProxy) SetRefusing(on bool) {
	p.mu.Lock()
	p.refusing = on
	p.mu.Unlock()
}

// Stall stops relaying on every connection the proxy carries now, without
// closing them; new connections work. It returns how many it stalled.
func (p *tcpProxy) Stall() int {
	ls := p.snapshot()
	for _, l := range ls {
		l.stalled.Store(true)
	}
	return len(ls)
}

// relayGreeting copies a MySQL server's first packet, its greeting, from
// server to client and returns the thread id it announces: protocol version
// (1 byte), server version (NUL-terminated), then the id (4 bytes, little
// endian).
func relayGreeting(server, client net.Conn) (uint32, error) {
	_ = server.SetReadDeadline(time.Now().Add(5 * time.Second))
	defer server.SetReadDeadline(time.Time{})
	var head [4]byte // payload length (3 bytes, little endian), sequence
	if _, err := io.ReadFull(server, head[:]); err != nil {
		return 0, err
	}
	payload := make([]byte, int(head[0])|int(head[1])<<8|int(head[2])<<16)
	if _, err := io.ReadFull(server, payload); err != nil {
		return 0, err
	}
	if _, err := client.Write(append(head[:], payload...)); err != nil {
		return 0, err
	}
	if len(payload) < 1 || payload[0] != 10 {
		return 0, errors.New("not a MySQL protocol 10 greeting")
	}
	for i := 1; i < len(payload); i++ {
		if payload[i] == 0 {
			if len(payload) < i+5 {
				break
			}
			return binary.LittleEndian.Uint32(payload[i+1:]), nil
		}
	}
	return 0, errors.New("short MySQL greeting")
}

// ThreadIDs returns the MySQL thread ids of the sessions the proxy carries
// now (a proxy made with mysql true).
func (p *tcpProxy) ThreadIDs() []uint32 {
	var ids []uint32
	for _, l := range p.snapshot() {
		if l.threadID != 0 {
			ids = append(ids, l.threadID)
		}
	}
	return ids
}

func (p *tcpProxy) close() {
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	_ = p.ln.Close()
	p.Cut()
	p.wg.Wait()
}
