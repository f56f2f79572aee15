package gateway

import (
	"context"
	"errors"
	"maps"
	"net/http"
	"sync"
	"time"

	"connectrpc.com/connect"
	"connectrpc.com/grpchealth"
	"connectrpc.com/grpcreflect"

	"github.com/leasegate/leasegate/proto/leasegate/v1/leasegatev1connect"
)

// Handler assembles everything the gateway serves on one port: the Connect
// services (Connect, gRPC, gRPC-Web), grpc.health.v1, server reflection,
// the REST API and GET /healthz.
func (s *Service) Handler(opts ...connect.HandlerOption) http.Handler {
	mux := http.NewServeMux()
	opts = append(append([]connect.HandlerOption{
		connect.WithReadMaxBytes(int(s.cfg.MaxBodyBytes)),
		connect.WithSendMaxBytes(int(s.cfg.MaxBodyBytes)),
		// Lock messages are a few hundred bytes: gzip costs more CPU than
		// it saves on the wire.
		connect.WithCompressMinBytes(1024),
	}, append(codecOptions(), s.tel.handlerOptions()...)...), opts...)
	// Errors are translated innermost, so every interceptor above,
	// telemetry's and the caller's, sees Connect errors.
	opts = append(opts, connect.WithInterceptors(errorTranslator{}))
	mux.Handle(leasegatev1connect.NewLockServiceHandler(s, opts...))
	mux.Handle(leasegatev1connect.NewElectionServiceHandler(s.Elections(), opts...))
	mux.Handle(leasegatev1connect.NewAdminServiceHandler(s, opts...))
	mux.Handle(grpchealth.NewHandler(s.Health()))
	reflector := grpcreflect.NewStaticReflector(leasegatev1connect.LockServiceName, leasegatev1connect.ElectionServiceName, leasegatev1connect.AdminServiceName, grpchealth.HealthV1ServiceName)
	mux.Handle(grpcreflect.NewHandlerV1(reflector))
	mux.Handle(grpcreflect.NewHandlerV1Alpha(reflector))
	s.handleREST(mux)
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		err := s.Health().ping(r.Context())
		shards := s.Health().shardStatus()
		out, code := map[string]any{"status": "ok", "shards": shards}, http.StatusOK
		for _, v := range shards {
			if v != "ok" {
				out["status"] = "degraded"
			}
		}
		if err != nil {
			out["status"], code = "unavailable", http.StatusServiceUnavailable
			out["error"] = map[string]string{"code": "unavailable", "message": "no etcd cluster is answering"}
		}
		writeJSON(w, code, out)
	})
	for _, rt := range s.routes {
		mux.Handle(rt.pattern, rt.h)
	}
	return s.edge(mux)
}

// NewHTTPServer returns an http.Server on addr for h, speaking HTTP/1.1
// and h2c (for gRPC), with header-read, idle and header-size limits.
func NewHTTPServer(addr string, h http.Handler) *http.Server {
	var p http.Protocols
	p.SetHTTP1(true)
	p.SetUnencryptedHTTP2(true)
	p.SetHTTP2(true)
	return &http.Server{
		Addr:              addr,
		Handler:           h,
		Protocols:         &p,
		ReadHeaderTimeout: 5 * time.Second,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    64 << 10,
		HTTP2: &http.HTTP2Config{
			MaxConcurrentStreams: 1000,
			// A request is one message of at most MaxBodyBytes (64 KiB by
			// default): what a client may push ahead of the gateway's
			// reading is bounded per stream and per connection.
			MaxReceiveBufferPerStream:     256 << 10,
			MaxReceiveBufferPerConnection: 4 << 20,
			// A connection that stops answering pings is dropped, and with
			// it every stream it carries.
			SendPingTimeout: 30 * time.Second,
			PingTimeout:     15 * time.Second,
		},
	}
}

// Health reports the gateway's readiness: serving while it is not shutting
// down and at least one shard's etcd answers (GET /healthz then says
// "degraded" and names the shards that do not).
type Health struct {
	svc *Service

	mu      sync.Mutex
	checked time.Time
	last    error
	shards  map[string]string
}

// Health returns the service's health checker.
func (s *Service) Health() *Health { return s.health }

// Check implements grpchealth.Checker for the whole server and for
// leasegate.v1.LockService and leasegate.v1.ElectionService.
func (h *Health) Check(ctx context.Context, req *grpchealth.CheckRequest) (*grpchealth.CheckResponse, error) {
	if req.Service != "" && req.Service != leasegatev1connect.LockServiceName && req.Service != leasegatev1connect.ElectionServiceName {
		return nil, connect.NewError(connect.CodeNotFound, nil)
	}
	select {
	case <-h.svc.shutdown:
	default:
		if h.ping(ctx) == nil {
			return &grpchealth.CheckResponse{Status: grpchealth.StatusServing}, nil
		}
	}
	return &grpchealth.CheckResponse{Status: grpchealth.StatusNotServing}, nil
}

// ping asks every shard's etcd for a linearizable read, at most once a
// second (health probes do not load etcd). The gateway is serving while at
// least one shard answers: a dead cluster fails only its own names, so it
// must not take every replica out of its load balancer.
func (h *Health) ping(ctx context.Context) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.svc.clk.Now().Sub(h.checked) < time.Second {
		return h.last
	}
	ctx, cancel := h.svc.withTimeout(ctx, 2*time.Second, nil)
	defer cancel()
	h.shards = map[string]string{}
	var err error = errors.New("no shard answers")
	for _, sh := range h.svc.router.Ping(ctx) {
		if sh.Err != nil {
			h.shards[sh.Shard] = "unavailable"
			continue
		}
		h.shards[sh.Shard] = "ok"
		err = nil
	}
	h.checked, h.last = h.svc.clk.Now(), err
	return err
}

// Shards reports each shard's etcd as "ok" or "unavailable", as GET
// /healthz does. It blocks for the reads, at most 2 s.
func (h *Health) Shards(ctx context.Context) map[string]string {
	_ = h.ping(ctx)
	return h.shardStatus()
}

// shardStatus returns the last per-shard result.
func (h *Health) shardStatus() map[string]string {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make(map[string]string, len(h.shards))
	maps.Copy(out, h.shards)
	return out
}
