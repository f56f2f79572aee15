package conformance_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
	"time"

	"github.com/leasegate/leasegate/client"
)

// do runs one step.
func (r *run) do(s step) error {
	switch s.Op {
	case "client":
		return r.newClient(s)
	case "openSession":
		c, ok := r.clients[s.Client]
		if !ok {
			return fmt.Errorf("no client %q", s.Client)
		}
		var opts []client.SessionOption
		if s.TTLMs > 0 {
			opts = append(opts, client.WithTTL(ms(s.TTLMs)))
		}
		sess, err := c.OpenSession(r.ctx, opts...)
		if err != nil {
			return err
		}
		r.sessions[s.As] = sess
		return nil
	case "closeSession":
		sess, ok := r.sessions[s.Session]
		if !ok {
			return fmt.Errorf("no session %q", s.Session)
		}
		return expectErr(s.ExpectError, sess.Close(r.ctx))
	case "acquire":
		return r.acquire(s)
	case "tryAcquire":
		return r.tryAcquire(s)
	case "awaitGranted":
		return r.awaitGranted(s)
	case "awaitPosition":
		return r.awaitPosition(s)
	case "awaitError":
		h, err := r.handleOf(s.Lock)
		if err != nil {
			return err
		}
		select {
		case <-h.done:
		case <-time.After(timeoutOf(s)):
			return fmt.Errorf("lock %q: the acquire had not ended after %s", s.Lock, timeoutOf(s))
		}
		if h.lock != nil {
			return fmt.Errorf("lock %q was granted; want error %q", s.Lock, s.Error)
		}
		if err := expectErr(s.Error, h.err); err != nil {
			return err
		}
		return elapsedWithin(s, h.grantedAt.Sub(h.start))
	case "expectWaiting":
		h, err := r.handleOf(s.Lock)
		if err != nil {
			return err
		}
		select {
		case <-h.done:
			return fmt.Errorf("lock %q: the acquire ended (granted: %v, error: %v); want it still waiting", s.Lock, h.lock != nil, h.err)
		case <-time.After(ms(s.ForMs)):
			return nil
		}
	case "release":
		_, l, err := r.held(s.Lock)
		if err != nil {
			return err
		}
		return expectErr(s.ExpectError, l.Release(r.ctx))
	case "renew":
		_, l, err := r.held(s.Lock)
		if err != nil {
			return err
		}
		t0 := time.Now()
		_, err = l.Renew(r.ctx)
		if err := expectErr(s.ExpectError, err); err != nil {
			return err
		}
		return elapsedWithin(s, time.Since(t0))
	case "expectHeld":
		_, l, err := r.held(s.Lock)
		if err != nil {
			return err
		}
		if err := l.Err(); err != nil {
			return fmt.Errorf("lock %q is not held: %v", s.Lock, err)
		}
		return nil
	case "expectReleased":
		_, l, err := r.held(s.Lock)
		if err != nil {
			return err
		}
		select {
		case <-l.Done():
		case <-time.After(timeoutOf(s)):
			return fmt.Errorf("lock %q: no released signal within %s", s.Lock, timeoutOf(s))
		}
		return expectErr("released", l.Err())
	case "awaitLost":
		return r.awaitLost(s)
	case "awaitLostInLease":
		return r.awaitLostInLease(s)
	case "stopGateway", "startGateway":
		if s.Gateway == nil {
			return fmt.Errorf("%s needs a gateway", s.Op)
		}
		verb := map[string]string{"stopGateway": "stop", "startGateway": "start"}[s.Op]
		return r.control("POST", fmt.Sprintf("/gateways/%d/%s", *s.Gateway, verb), nil, nil)
	case "resetRequests":
		for _, g := range s.Gateways {
			if err := r.control("POST", fmt.Sprintf("/gateways/%d/requests/reset", g), nil, nil); err != nil {
				return err
			}
		}
		return nil
	case "expectRequests":
		if (s.Count == nil) == (s.AtLeast == 0) || s.Method == "" {
			return fmt.Errorf("expectRequests needs a method and a count or atLeast")
		}
		n, all, err := r.requests(s.Gateways, s.Method, s.Token)
		if err != nil {
			return err
		}
		if s.Count != nil && n != *s.Count || s.Count == nil && n < int64(s.AtLeast) {
			return fmt.Errorf("gateways %v received %d %s requests (token %q); want count %v, at least %d (all requests by token:%s)",
				s.Gateways, n, s.Method, s.Token, fmtCount(s.Count), s.AtLeast, all)
		}
		return nil
	case "rotateToken":
		b, ok := r.sources[s.Client]
		if !ok {
			return fmt.Errorf("client %q has no token source", s.Client)
		}
		tok, ok := r.desc.Tokens[s.Token]
		if !ok {
			return fmt.Errorf("no token %q in the description", s.Token)
		}
		b.tok.Store(&tok)
		return nil
	case "alignRevision":
		return r.control("POST", "/revision", map[string]string{"next": s.Next}, nil)
	case "expectRenewals":
		return r.expectRenewals(s)
	case "fenceWrite":
		return r.fenceWrite(s)
	case "expectTokenAbove":
		return r.expectTokenAbove(s)
	case "expectTokenExact":
		_, l, err := r.held(s.Lock)
		if err != nil {
			return err
		}
		var got struct {
			Held  bool   `json:"held"`
			Token string `json:"token"`
		}
		if err := r.control("GET", queryName(r.locks[s.Lock].name), nil, &got); err != nil {
			return err
		}
		if !got.Held || got.Token != tokenString(l) {
			return fmt.Errorf("lock %q: the SDK's token is %s; the gateway reads held=%v token %s", s.Lock, tokenString(l), got.Held, got.Token)
		}
		if s.Odd && l.Token()%2 != 1 {
			return fmt.Errorf("lock %q: token %s is even; the scenario arranged an odd one", s.Lock, tokenString(l))
		}
		return nil
	case "raiseEpoch":
		var got struct {
			Epoch int `json:"epoch"`
		}
		if err := r.control("POST", "/epoch", map[string]int{"atLeast": s.AtLeast}, &got); err != nil {
			return err
		}
		if got.Epoch < s.AtLeast {
			return fmt.Errorf("epoch %d after raising to at least %d", got.Epoch, s.AtLeast)
		}
		return nil
	case "withLock":
		return r.withLock(s)
	}
	return fmt.Errorf("unknown op %q", s.Op)
}

func (r *run) newClient(s step) error {
	var eps []string
	for _, g := range s.Gateways {
		if g < 0 || g >= len(r.desc.Gateways) {
			return fmt.Errorf("no gateway %d", g)
		}
		eps = append(eps, r.desc.Gateways[g])
	}
	var opts []client.Option
	if s.TLS != "" {
		cfg, err := r.tlsConfig(s.TLS)
		if err != nil {
			return err
		}
		if len(eps) > 0 {
			return fmt.Errorf("client with tls %q: its endpoint is the TLS gateway; want no gateways", s.TLS)
		}
		eps = []string{r.desc.TLS.Gateway}
		opts = append(opts, client.WithTLSConfig(cfg))
	}
	switch tok, ok := r.desc.Tokens[s.Token]; {
	case s.Token == "none":
	case !ok:
		return fmt.Errorf("token %q: want none or one of the description's tokens", s.Token)
	case s.TokenSource:
		b := &tokenBox{}
		b.tok.Store(&tok)
		r.sources[s.As] = b
		opts = append(opts, client.WithTokenSource(b.source))
	default:
		opts = append(opts, client.WithBearerToken(tok))
	}
	if s.Record {
		g := &renewLog{}
		r.renewals[s.As] = g
		opts = append(opts, client.WithOnRenew(g.observe))
	}
	c, err := client.New(eps, opts...)
	if err != nil {
		return err
	}
	r.clients[s.As] = c
	return nil
}

// tlsConfig trusts the TLS gateway's CA and, for "cert", presents the
// description's client certificate.
func (r *run) tlsConfig(mode string) (*tls.Config, error) {
	pem, err := os.ReadFile(r.desc.TLS.CA)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("%s holds no certificate", r.desc.TLS.CA)
	}
	cfg := &tls.Config{RootCAs: pool}
	switch mode {
	case "cert":
		cert, err := tls.LoadX509KeyPair(r.desc.TLS.Cert, r.desc.TLS.Key)
		if err != nil {
			return nil, err
		}
		cfg.Certificates = []tls.Certificate{cert}
	case "noCert":
	default:
		return nil, fmt.Errorf("tls %q: want cert or noCert", mode)
	}
	return cfg, nil
}

// expectRenewals holds the lock for s.ForMs without touching it and then
// checks the renewals the client's WithOnRenew function saw meanwhile: at
// least s.AtLeast confirmed, each leaving a deadline no later than its
// send time plus the TTL, and the lock never lost.
func (r *run) expectRenewals(s step) error {
	h, l, err := r.held(s.Lock)
	if err != nil {
		return err
	}
	g, ok := r.renewals[h.client]
	if !ok || h.ttl == 0 {
		return fmt.Errorf("lock %q: expectRenewals needs a client with recordRenewals and a lock with ttlMs", s.Lock)
	}
	from := len(g.since(0))
	select {
	case <-l.Done():
		return fmt.Errorf("lock %q was lost while held: %v", s.Lock, l.Err())
	case <-time.After(ms(s.ForMs)):
	}
	confirmed := 0
	for _, rn := range g.since(from) {
		if rn.err != nil {
			continue
		}
		confirmed++
		if limit := rn.sent.Add(h.ttl); rn.expires.After(limit) {
			return fmt.Errorf("lock %q: a renewal sent at %s left the deadline at %s, %s past send time + TTL",
				s.Lock, rn.sent.Format(time.StampMilli), rn.expires.Format(time.StampMilli), rn.expires.Sub(limit))
		}
	}
	if confirmed < s.AtLeast {
		return fmt.Errorf("lock %q: %d renewals confirmed in %dms; want at least %d", s.Lock, confirmed, s.ForMs, s.AtLeast)
	}
	return nil
}

func fmtCount(c *int64) any {
	if c == nil {
		return "-"
	}
	return *c
}

func (r *run) acquire(s step) error {
	c, sess, err := r.clientOf(s)
	if err != nil {
		return err
	}
	h := r.newHandle(s)
	r.locks[s.As] = h
	opts := acquireOpts(s, r.prefix, h)
	log := r.renewals[s.Client]
	go func() {
		var l *client.Lock
		var err error
		if sess != nil {
			l, err = sess.Acquire(r.ctx, h.name, opts...)
		} else {
			l, err = c.Acquire(r.ctx, h.name, opts...)
		}
		h.finish(r.ctx, l, err, log)
	}()
	return nil
}

func (r *run) tryAcquire(s step) error {
	c, sess, err := r.clientOf(s)
	if err != nil {
		return err
	}
	h := r.newHandle(s)
	opts := acquireOpts(s, r.prefix, nil)
	var l *client.Lock
	if sess != nil {
		l, err = sess.TryAcquire(r.ctx, h.name, opts...)
	} else {
		l, err = c.TryAcquire(r.ctx, h.name, opts...)
	}
	h.finish(r.ctx, l, err, r.renewals[s.Client])
	if s.As != "" {
		r.locks[s.As] = h
	}
	if err := expectErr(s.ExpectError, err); err != nil {
		return err
	}
	return elapsedWithin(s, h.grantedAt.Sub(h.start))
}

func (r *run) awaitGranted(s step) error {
	h, err := r.handleOf(s.Lock)
	if err != nil {
		return err
	}
	select {
	case <-h.done:
	case <-time.After(timeoutOf(s)):
		return fmt.Errorf("lock %q: not granted within %s", s.Lock, timeoutOf(s))
	}
	if h.err != nil {
		return fmt.Errorf("lock %q: the acquire failed with %s: %v", s.Lock, errorKind(h.err), h.err)
	}
	if s.AfterLossOf != "" {
		o, err := r.handleOf(s.AfterLossOf)
		if err != nil {
			return err
		}
		lost := o.lostTime()
		if lost.IsZero() || !h.grantedAt.After(lost) {
			return fmt.Errorf("lock %q was granted at %s, before %q's loss signal (%s)", s.Lock, h.grantedAt.Format(time.StampMicro), s.AfterLossOf, lost.Format(time.StampMicro))
		}
	}
	return nil
}

func (r *run) awaitPosition(s step) error {
	h, err := r.handleOf(s.Lock)
	if err != nil {
		return err
	}
	deadline := time.After(timeoutOf(s))
	for {
		h.mu.Lock()
		for i := h.consumed; i < len(h.positions); i++ {
			if h.positions[i] == s.Position {
				h.consumed = i + 1
				h.mu.Unlock()
				return nil
			}
		}
		changed, seen := h.changed, append([]int64(nil), h.positions...)
		h.mu.Unlock()
		select {
		case <-changed:
		case <-h.done:
			return fmt.Errorf("lock %q: the acquire ended (error: %v) before position %d; positions reported: %v", s.Lock, h.err, s.Position, seen)
		case <-deadline:
			return fmt.Errorf("lock %q: no position %d within %s; positions reported: %v", s.Lock, s.Position, timeoutOf(s), seen)
		}
	}
}

func (r *run) awaitLost(s step) error {
	h, l, err := r.held(s.Lock)
	if err != nil {
		return err
	}
	if s.WithinMs == nil {
		return fmt.Errorf("awaitLost needs withinMs")
	}
	deadline := l.Expires()
	limit := deadline.Add(ms(*s.WithinMs))
	select {
	case <-l.Done():
	case <-time.After(time.Until(limit) + 5*time.Second):
		return fmt.Errorf("lock %q: no loss signal by %s, 5 s past its deadline %s", s.Lock, limit.Format(time.StampMilli), deadline.Format(time.StampMilli))
	}
	want := s.Error
	if want == "" {
		want = "lockLost"
	}
	if err := expectErr(want, l.Err()); err != nil {
		return err
	}
	if lost := h.signalledAt(); lost.After(limit) {
		return fmt.Errorf("lock %q: loss signalled %s after its conservative deadline; want at most %dms", s.Lock, lost.Sub(deadline), *s.WithinMs)
	}
	return nil
}

// awaitLostInLease waits for the lock's loss signal and checks when it
// fired against the lease as the gateways saw it, not as the SDK reports
// it: no later than A + TTL, A being the arrival at s.Gateways' fronts of
// the latest Acquire, TryAcquire or Renew they answered without error
// (etcd counts the lease's TTL from no earlier than that arrival, so the
// lease may be gone from then on), and no earlier than A + TTL − earlyMs.
func (r *run) awaitLostInLease(s step) error {
	h, l, err := r.held(s.Lock)
	if err != nil {
		return err
	}
	if h.ttl == 0 || s.EarlyMs <= 0 || len(s.Gateways) == 0 {
		return fmt.Errorf("awaitLostInLease needs gateways, earlyMs and a lock with ttlMs")
	}
	select {
	case <-l.Done():
	case <-time.After(timeoutOf(s)):
		return fmt.Errorf("lock %q: no loss signal within %s", s.Lock, timeoutOf(s))
	}
	lost := h.signalledAt()
	last, err := r.lastConfirmed(s.Gateways)
	if err != nil {
		return err
	}
	expiry := last.Add(h.ttl)
	if lost.After(expiry) {
		return fmt.Errorf("lock %q: loss signalled at %s, %s after the lease could have lapsed in etcd (last confirmed request arrived at %s, TTL %s)",
			s.Lock, lost.Format(time.StampMilli), lost.Sub(expiry), last.Format(time.StampMilli), h.ttl)
	}
	if earliest := expiry.Add(-ms(s.EarlyMs)); lost.Before(earliest) {
		return fmt.Errorf("lock %q: loss signalled at %s, %s before the lease could have lapsed in etcd (last confirmed request arrived at %s, TTL %s); want at most %dms before",
			s.Lock, lost.Format(time.StampMilli), expiry.Sub(lost), last.Format(time.StampMilli), h.ttl, s.EarlyMs)
	}
	return nil
}

func (r *run) fenceWrite(s step) error {
	h, l, err := r.held(s.Lock)
	if err != nil {
		return err
	}
	resource := h.name
	if s.Resource != "" {
		resource = r.name(s.Resource)
	}
	var got struct {
		Accepted bool   `json:"accepted"`
		Highest  string `json:"highest"`
	}
	if err := r.control("POST", "/fence", map[string]string{"resource": resource, "token": tokenString(l)}, &got); err != nil {
		return err
	}
	if want := s.Expect == "accepted"; got.Accepted != want {
		return fmt.Errorf("write under token %s: accepted=%v (highest %s); want %s", tokenString(l), got.Accepted, got.Highest, s.Expect)
	}
	return nil
}

func (r *run) expectTokenAbove(s step) error {
	_, l, err := r.held(s.Lock)
	if err != nil {
		return err
	}
	var than int64
	switch {
	case s.ThanLock != "":
		_, o, err := r.held(s.ThanLock)
		if err != nil {
			return err
		}
		than = o.Token()
	case s.Than != "":
		if than, err = parseToken(s.Than); err != nil {
			return fmt.Errorf("than %q: %v", s.Than, err)
		}
	default:
		return fmt.Errorf("expectTokenAbove needs thanLock or than")
	}
	if l.Token() <= than {
		return fmt.Errorf("lock %q's token %d is not above %d", s.Lock, l.Token(), than)
	}
	return nil
}

// withLock runs the SDK's run-under-lock convenience with a body that
// leaves by s.Exit.
func (r *run) withLock(s step) (err error) {
	c, sess, err := r.clientOf(s)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(r.ctx)
	defer cancel()
	ran := false
	body := func(fctx context.Context) error {
		ran = true
		switch s.Exit {
		case "return":
			return nil
		case "error":
			return errCallback
		case "throw":
			panic("conformance: the body throws")
		case "cancel":
			cancel()
			<-fctx.Done()
			return fctx.Err()
		}
		return fmt.Errorf("exit %q: want return, error, throw or cancel", s.Exit)
	}
	name := r.name(s.Name)
	opts := acquireOpts(s, r.prefix, nil)
	func() {
		defer func() {
			if p := recover(); p != nil {
				err = thrown{p}
			}
		}()
		if sess != nil {
			err = sess.Do(ctx, name, body, opts...)
		} else {
			err = c.Do(ctx, name, body, opts...)
		}
	}()
	if !ran {
		return fmt.Errorf("the body never ran: %v", err)
	}
	return expectErr(s.ExpectError, err)
}
