package conformance

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"connectrpc.com/connect"

	"github.com/leasegate/leasegate/fence"
	"github.com/leasegate/leasegate/internal/etcdtest"
	v1 "github.com/leasegate/leasegate/proto/leasegate/v1"
	"github.com/leasegate/leasegate/proto/leasegate/v1/leasegatev1connect"
	"github.com/leasegate/leasegate/shard"
)

// controlHandler serves the control API (sdk/conformance/README.md,
// "Control API"). Tokens travel as decimal strings both ways: a JSON
// number loses tokens above 2^53 in half the languages under test.
func (h *Harness) controlHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /gateways/{i}/stop", h.withFront(func(f *front, w http.ResponseWriter, r *http.Request) {
		f.down()
		reply(w, http.StatusOK, struct{}{})
	}))
	mux.HandleFunc("POST /gateways/{i}/start", h.withFront(func(f *front, w http.ResponseWriter, r *http.Request) {
		if err := f.up(r.Context()); err != nil {
			reply(w, http.StatusInternalServerError, errorBody{err.Error()})
			return
		}
		reply(w, http.StatusOK, struct{}{})
	}))
	mux.HandleFunc("GET /gateways/{i}/requests", h.withFront(func(f *front, w http.ResponseWriter, r *http.Request) {
		reply(w, http.StatusOK, f.requests())
	}))
	mux.HandleFunc("POST /gateways/{i}/requests/reset", h.withFront(func(f *front, w http.ResponseWriter, r *http.Request) {
		f.resetRequests()
		reply(w, http.StatusOK, struct{}{})
	}))
	mux.HandleFunc("POST /reset", h.reset)
	mux.HandleFunc("POST /fence", h.fenceWrite)
	mux.HandleFunc("GET /holder", h.holder)
	mux.HandleFunc("POST /epoch", h.raiseEpoch)
	mux.HandleFunc("POST /revision", h.alignRevision)
	return mux
}

type errorBody struct {
	Error string `json:"error"`
}

type requestsBody struct {
	Total    int64                       `json:"total"`
	ByPath   map[string]int64            `json:"byPath"`
	ByToken  map[string]map[string]int64 `json:"byToken"`
	Arrivals map[string][]Arrival        `json:"arrivals"`
}

func reply(w http.ResponseWriter, code int, body any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(body)
}

func (h *Harness) withFront(fn func(*front, http.ResponseWriter, *http.Request)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		i, err := strconv.Atoi(r.PathValue("i"))
		if err != nil || i < 0 || i >= len(h.fronts) {
			reply(w, http.StatusNotFound, errorBody{fmt.Sprintf("no gateway %q: the gateways are 0 to %d", r.PathValue("i"), len(h.fronts)-1)})
			return
		}
		fn(h.fronts[i], w, r)
	}
}

// reset starts every stopped gateway and zeroes every request count: what
// a runner calls between scenarios, so one scenario's failure does not
// leave the next with a gateway down.
func (h *Harness) reset(w http.ResponseWriter, r *http.Request) {
	for i, f := range h.fronts {
		if err := f.up(r.Context()); err != nil {
			reply(w, http.StatusInternalServerError, errorBody{fmt.Sprintf("gateway %d: %v", i, err)})
			return
		}
		f.resetRequests()
	}
	reply(w, http.StatusOK, struct{}{})
}

type fenceRequest struct {
	Resource string `json:"resource"`
	Token    string `json:"token"`
}

type fenceReply struct {
	Accepted bool   `json:"accepted"`
	Highest  string `json:"highest"`
}

// fenceWrite offers a write with a token to the memory guard: accepted
// when the token is at least the highest the resource has accepted.
func (h *Harness) fenceWrite(w http.ResponseWriter, r *http.Request) {
	var req fenceRequest
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		reply(w, http.StatusBadRequest, errorBody{"want {\"resource\": string, \"token\": decimal string}: " + err.Error()})
		return
	}
	tok, err := strconv.ParseInt(req.Token, 10, 64)
	if err != nil || req.Resource == "" {
		reply(w, http.StatusBadRequest, errorBody{fmt.Sprintf("resource %q, token %q: want a resource and a positive decimal token", req.Resource, req.Token)})
		return
	}
	werr := h.guard.Write(r.Context(), req.Resource, tok, func() error { return nil })
	if werr != nil && !errors.Is(werr, fence.ErrStaleToken) {
		reply(w, http.StatusBadRequest, errorBody{werr.Error()})
		return
	}
	highest, _, _ := h.guard.Highest(r.Context(), req.Resource)
	reply(w, http.StatusOK, fenceReply{Accepted: werr == nil, Highest: strconv.FormatInt(highest, 10)})
}

type holderReply struct {
	Held  bool   `json:"held"`
	Token string `json:"token"`
}

// holder reports the fencing token of a name's holder as a normal
// gateway reads it (Describe, as the normal tenant), by a call the
// request counts do not see.
func (h *Harness) holder(w http.ResponseWriter, r *http.Request) {
	name := r.URL.Query().Get("name")
	var url string
	for i, f := range h.fronts {
		if u, ok := f.running(); ok && i != LimitedGateway {
			url = u
			break
		}
	}
	if name == "" || url == "" {
		reply(w, http.StatusBadRequest, errorBody{fmt.Sprintf("name %q: want ?name= and a normal gateway running", name)})
		return
	}
	rpc := leasegatev1connect.NewLockServiceClient(&http.Client{Transport: bearerTransport{h.desc.Tokens[TenantNormal], h.calls}}, url)
	resp, err := rpc.Describe(r.Context(), connect.NewRequest(&v1.DescribeRequest{Name: name}))
	if err != nil {
		reply(w, http.StatusBadGateway, errorBody{err.Error()})
		return
	}
	reply(w, http.StatusOK, holderReply{Held: resp.Msg.Held, Token: strconv.FormatInt(resp.Msg.FencingToken, 10)})
}

type epochRequest struct {
	AtLeast uint16 `json:"atLeast"`
}

type epochReply struct {
	Epoch uint16 `json:"epoch"`
}

// raiseEpoch moves the fleet's shard map forward, one bump at a time
// (shard.Resharder.BumpEpoch, past the JSON-safe limit), until its epoch is
// at least the one asked for. Every token granted to a waiter enqueued
// after it is epoch<<48 | revision: epoch 32 puts every token above 2^53.
// Tokens are per fleet, not per name, so the raise is for every name, and
// it never goes back.
func (h *Harness) raiseEpoch(w http.ResponseWriter, r *http.Request) {
	var req epochRequest
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil || req.AtLeast < shard.MinEpoch || req.AtLeast > shard.MaxEpoch {
		reply(w, http.StatusBadRequest, errorBody{fmt.Sprintf("want {\"atLeast\": epoch in [%d, %d]}", shard.MinEpoch, shard.MaxEpoch)})
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), time.Minute)
	defer cancel()
	epoch, err := h.bumpTo(ctx, req.AtLeast)
	if err != nil {
		reply(w, http.StatusInternalServerError, errorBody{err.Error()})
		return
	}
	reply(w, http.StatusOK, epochReply{Epoch: epoch})
}

func (h *Harness) bumpTo(ctx context.Context, target uint16) (uint16, error) {
	cli, err := etcdtest.NewClient(h.etcd.Endpoint())
	if err != nil {
		return 0, err
	}
	defer cli.Close()
	rs := &shard.Resharder{
		Store:      shard.NewStore(cli, h.prefix),
		Prefix:     h.prefix,
		EpochLimit: shard.MaxEpoch,
		Endpoints:  map[string][]string{"main": {h.etcd.Endpoint()}},
	}
	snap, err := rs.Store.Load(ctx)
	if err != nil {
		return 0, err
	}
	m := snap.Map
	for m.Epoch < target {
		if m, err = rs.BumpEpoch(ctx); err != nil {
			return m.Epoch, err
		}
	}
	return m.Epoch, nil
}

// bearerTransport presents a bearer token on every request sent by base.
type bearerTransport struct {
	token string
	base  http.RoundTripper
}

func (b bearerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return b.base.RoundTrip(r)
}

type revisionRequest struct {
	Next string `json:"next"`
}

type revisionReply struct {
	Revision int64 `json:"revision"`
}

// fillerKey is where alignRevision writes: outside the fleet's prefix, so
// no gateway watches it.
const fillerKey = "/conformance-harness/filler"

// alignRevision writes a filler key until etcd's revision is such that the
// next write gets a revision of the parity asked for ("odd" or "even"):
// the next grant's create revision, and so the low bit of its fencing
// token, is then known. A double holds only even integers between 2^53
// and 2^54, so an odd token there is one no float can carry.
func (h *Harness) alignRevision(w http.ResponseWriter, r *http.Request) {
	var req revisionRequest
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil || (req.Next != "odd" && req.Next != "even") {
		reply(w, http.StatusBadRequest, errorBody{`want {"next": "odd" | "even"}`})
		return
	}
	cli, err := etcdtest.NewClient(h.etcd.Endpoint())
	if err != nil {
		reply(w, http.StatusInternalServerError, errorBody{err.Error()})
		return
	}
	defer cli.Close()
	wantOdd := req.Next == "odd"
	for {
		resp, err := cli.Put(r.Context(), fillerKey, "")
		if err != nil {
			reply(w, http.StatusInternalServerError, errorBody{err.Error()})
			return
		}
		if rev := resp.Header.Revision; (rev%2 == 0) == wantOdd {
			reply(w, http.StatusOK, revisionReply{Revision: rev})
			return
		}
	}
}
