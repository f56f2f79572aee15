package gateway

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"

	"connectrpc.com/connect"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/leasegate/leasegate/locks"
	v1 "github.com/leasegate/leasegate/proto/leasegate/v1"
	"github.com/leasegate/leasegate/proto/leasegate/v1/leasegatev1connect"
	"github.com/leasegate/leasegate/queue"
)

var _ leasegatev1connect.AdminServiceHandler = (*Service)(nil)

// admin returns the caller's identity if it may use AdminService: its
// credentials grant RoleAdmin, or, with no authentication configured, it
// is the local operator, whom the edge gave that role (it then acts as
// "loopback/<address>"), charged to its acquire rates.
func (s *Service) admin(ctx context.Context, peer connect.Peer) (Identity, error) {
	id, err := s.caller(ctx)
	if err != nil {
		return id, err
	}
	if !id.HasRole(RoleAdmin) {
		if id.Method == "none" {
			why := id.notLocal
			if why == nil {
				why = errors.New("it did not pass the gateway's edge")
			}
			return id, fmt.Errorf("%w: without authentication configured, AdminService serves the local operator only, and this call is not theirs: %v", ErrForbidden, why)
		}
		return id, fmt.Errorf("%w: AdminService needs the %q role", ErrForbidden, RoleAdmin)
	}
	if id.Method == "none" {
		id.Subject = "loopback/" + peer.Addr
	}
	return id, s.lim.acquire(id)
}

// loopbackPeer reports whether a peer address ("host:port") is loopback.
func loopbackPeer(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		host = addr
	}
	ip, err := netip.ParseAddr(strings.Trim(host, "[]"))
	return err == nil && ip.Unmap().IsLoopback()
}

// ForceRelease evicts a name's holder and records why.
func (s *Service) ForceRelease(ctx context.Context, req *connect.Request[v1.ForceReleaseRequest]) (*connect.Response[v1.ForceReleaseResponse], error) {
	name := req.Msg.Name
	if err := queue.ValidateName(name); err != nil {
		return nil, fieldOf("name", err)
	}
	if req.Msg.Reason == "" {
		return nil, fieldOf("reason", fmt.Errorf("%w: a reason is required", queue.ErrInvalidArgument))
	}
	id, err := s.admin(ctx, req.Peer())
	if err != nil {
		return nil, err
	}
	if err := s.allow(id, name); err != nil {
		return nil, err
	}
	actor := id.owner()
	shard, res, err := s.router.ForceRelease(ctx, id.Tenant, queue.ForceReleaseRequest{
		Name: name, Reason: req.Msg.Reason, Actor: actor, Token: req.Msg.FencingToken,
		Retention: queue.AuditRetention{MaxRecords: s.cfg.AuditMaxRecords, MaxAge: s.cfg.AuditMaxAge},
	})
	if err != nil {
		return nil, err
	}
	out := &v1.ForceReleaseResponse{Released: res.Released, Shard: shard}
	if res.Released {
		out.EvictedFencingToken, out.EvictedClientId = res.Evicted.Token, res.Evicted.ClientID
		out.Audit = auditRecord(shard, res.Record)
		s.log.Warn("lock force-released", "name", name, "shard", shard, "tenant", id.Tenant, "actor", actor,
			"reason", req.Msg.Reason, "evicted_token", res.Evicted.Token, "evicted_client_id", res.Evicted.ClientID, "audit_id", res.Record.ID)
		if t := s.tel; t != nil && t.m != nil {
			t.m.forced.Add(ctx, 1, metric.WithAttributes(attribute.String("shard", shard)))
		}
	}
	return connect.NewResponse(out), nil
}

// auditToken is what a ListAudit page token carries: the id of the page's
// last (oldest) record.
type auditToken struct {
	Before string `json:"b"`
}

// ListAudit pages through the tenant's audit records across shards, newest first.
func (s *Service) ListAudit(ctx context.Context, req *connect.Request[v1.ListAuditRequest]) (*connect.Response[v1.ListAuditResponse], error) {
	size, err := pageSize(req.Msg.PageSize)
	if err != nil {
		return nil, err
	}
	var tok auditToken
	if err := decodeToken("page_token", req.Msg.PageToken, &tok, nil); err != nil {
		return nil, err
	}
	id, err := s.admin(ctx, req.Peer())
	if err != nil {
		return nil, err
	}
	all, more, err := s.router.ListAudit(ctx, id.Tenant, tok.Before, size)
	if err != nil {
		return nil, err
	}
	msgs, next := page(s, all, more, func(r locks.AuditRecord) *v1.AuditRecord { return auditRecord(r.Shard, r.AuditRecord) },
		func(r locks.AuditRecord) any { return auditToken{Before: r.ID} })
	return connect.NewResponse(&v1.ListAuditResponse{Records: msgs, NextPageToken: next}), nil
}

func auditRecord(shard string, r queue.AuditRecord) *v1.AuditRecord {
	return &v1.AuditRecord{
		Id: r.ID, Action: r.Action, Name: r.Name, Shard: shard, Actor: r.Actor, Reason: r.Reason,
		At: timestamppb.New(r.At), EvictedFencingToken: r.EvictedToken, EvictedClientId: r.EvictedClientID,
	}
}
