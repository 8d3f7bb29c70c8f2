package storetest

import (
	"net"
	"sync"
	"testing"
)

// Proxy is a TCP proxy between a store and its database server that can be made a
// black hole, as a network partition is: while it is, nothing passes in either direction
// (what is sent waits, as unacknowledged packets do) and new connections are accepted but
// not carried on; Restore lets everything through again. Tests of stores over a network,
// and of what the gateway does when its store stops answering, put it in between.
type Proxy struct {
	ln     net.Listener
	target string

	mu      sync.Mutex
	open    sync.Cond // signalled when blocked turns false or the proxy closes
	blocked bool
	closed  bool
	conns   map[net.Conn]struct{}
	wg      sync.WaitGroup
}

// NewProxy starts a proxy to target (host:port) on a port of 127.0.0.1, closed when t ends.
func NewProxy(t testing.TB, target string) *Proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("proxy: %v", err)
	}
	p := &Proxy{ln: ln, target: target, conns: map[net.Conn]struct{}{}}
	p.open.L = &p.mu
	p.wg.Go(p.accept)
	t.Cleanup(p.Close)
	return p
}

// Addr is the proxy's host:port.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Blackhole stops everything from passing.
func (p *Proxy) Blackhole() {
	p.mu.Lock()
	p.blocked = true
	p.mu.Unlock()
}

// Restore lets everything pass again, what waited first.
func (p *Proxy) Restore() {
	p.mu.Lock()
	p.blocked = false
	p.open.Broadcast()
	p.mu.Unlock()
}

// Close stops the proxy and drops its connections.
func (p *Proxy) Close() {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return
	}
	p.closed = true
	_ = p.ln.Close()
	for c := range p.conns {
		_ = c.Close()
	}
	p.open.Broadcast()
	p.mu.Unlock()
	p.wg.Wait()
}

// pass waits while the proxy is a black hole; false once it is closed.
func (p *Proxy) pass() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	for p.blocked && !p.closed {
		p.open.Wait()
	}
	return !p.closed
}

// drop closes c and forgets it.
func (p *Proxy) drop(c net.Conn) {
	_ = c.Close()
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
}

// track adds c to the connections Close drops; false once the proxy is closed.
func (p *Proxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		_ = c.Close()
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *Proxy) accept() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		if !p.track(c) {
			return
		}
		p.wg.Go(func() { p.serve(c) })
	}
}

func (p *Proxy) serve(client net.Conn) {
	defer p.drop(client)
	if !p.pass() {
		return
	}
	server, err := net.Dial("tcp", p.target)
	if err != nil || !p.track(server) {
		return
	}
	defer p.drop(server)
	done := make(chan struct{}, 2)
	pipe := func(dst, src net.Conn) {
		defer func() { done <- struct{}{} }()
		buf := make([]byte, 32<<10)
		for {
			n, err := src.Read(buf)
			if n > 0 && !p.pass() {
				return
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
			if err != nil {
				return
			}
		}
	}
	p.wg.Go(func() { pipe(server, client) })
	p.wg.Go(func() { pipe(client, server) })
	<-done
	// One side ended: end the other, so that its pipe returns.
	_ = client.Close()
	_ = server.Close()
	<-done
}
