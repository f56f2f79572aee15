package k6_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	rpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/descriptorpb"
	"google.golang.org/protobuf/types/dynamicpb"

	"github.com/leasegate/leasegate/internal/etcdtest"
	"github.com/leasegate/leasegate/internal/gwtest"
)

var (
	gw   *gwtest.Gateway
	etcd *etcdtest.Cluster
)

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "k6-etcd-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	etcd, err = etcdtest.StartIn(dir)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	if gw, err = gwtest.Launch(etcd, gwtest.Prefix("/k6test")); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	gw.Stop()
	etcd.Stop()
	os.RemoveAll(dir)
	if code == 0 {
		if err := goleak.Find(etcdtest.LeakOptions()...); err != nil {
			fmt.Fprintln(os.Stderr, "goroutine leak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// shapesFile mirrors shapes.json.
type shapesFile struct {
	REST    []httpStep `json:"rest"`
	Connect []httpStep `json:"connect"`
	GRPC    struct {
		Service string   `json:"service"`
		Acquire grpcStep `json:"acquire"`
		Release grpcStep `json:"release"`
	} `json:"grpc"`
}

type httpStep struct {
	Step     string            `json:"step"`
	Method   string            `json:"method"`
	Path     string            `json:"path"`
	Headers  map[string]string `json:"headers"`
	Body     any               `json:"body"`
	Status   []int             `json:"status"`
	Reads    []string          `json:"reads"`
	Captures map[string]string `json:"captures"`
}

type grpcStep struct {
	Method      string            `json:"method"`
	Message     any               `json:"message"`
	Reads       []string          `json:"reads"`
	QueuedReads []string          `json:"queuedReads"`
	Captures    map[string]string `json:"captures"`
}

func loadShapes(t *testing.T) shapesFile {
	t.Helper()
	b, err := os.ReadFile("shapes.json")
	if err != nil {
		t.Fatal(err)
	}
	var s shapesFile
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber() // numbers stay numbers, as in JavaScript
	if err := d.Decode(&s); err != nil {
		t.Fatalf("shapes.json: %v", err)
	}
	return s
}

// fill is lib.js's fill: "$x" becomes vars[x], with its type.
func fill(t *testing.T, v any, vars map[string]any) any {
	t.Helper()
	switch x := v.(type) {
	case string:
		if key, ok := strings.CutPrefix(x, "$"); ok {
			val, ok := vars[key]
			if !ok {
				t.Fatalf("no value for %s", x)
			}
			return val
		}
		return x
	case []any:
		out := make([]any, len(x))
		for i := range x {
			out[i] = fill(t, x[i], vars)
		}
		return out
	case map[string]any:
		out := map[string]any{}
		for k, e := range x {
			out[k] = fill(t, e, vars)
		}
		return out
	}
	return v
}

// field is lib.js's field: a dotted path into decoded JSON.
func field(obj any, path string) (any, bool) {
	v := obj
	for _, part := range strings.Split(path, ".") {
		m, ok := v.(map[string]any)
		if !ok {
			return nil, false
		}
		if v, ok = m[part]; !ok {
			return nil, false
		}
	}
	return v, true
}

func requireReads(t *testing.T, what string, obj any, reads []string) {
	t.Helper()
	for _, r := range reads {
		if _, ok := field(obj, r); !ok {
			t.Errorf("%s: the response %v has no %q, which the k6 script reads", what, obj, r)
		}
	}
}

func capture(t *testing.T, vars map[string]any, obj any, captures map[string]string) {
	t.Helper()
	for name, path := range captures {
		v, ok := field(obj, path)
		if !ok {
			t.Fatalf("cannot capture %s from %q of %v", name, path, obj)
		}
		vars[name] = v
	}
}

// replayHTTP sends the steps as k6/http would — the same method, path,
// headers and JSON body — and checks the status and the fields read.
func replayHTTP(t *testing.T, steps []httpStep, vars map[string]any) {
	t.Helper()
	replayHTTPTo(t, gw.URL, "", steps, vars)
}

// replayHTTPTo replays the steps against the gateway at base, with the
// Authorization header lib.js's authHeaders adds for token (none when "").
func replayHTTPTo(t *testing.T, base, token string, steps []httpStep, vars map[string]any) {
	t.Helper()
	for _, s := range steps {
		body, err := json.Marshal(fill(t, s.Body, vars))
		if err != nil {
			t.Fatal(err)
		}
		req, err := http.NewRequestWithContext(t.Context(), s.Method, base+s.Path, bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		for k, v := range s.Headers {
			req.Header.Set(k, v)
		}
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("%s: %v", s.Step, err)
		}
		raw, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if !slices.Contains(s.Status, resp.StatusCode) {
			t.Fatalf("%s %s %s: status %d (%s); the script expects %v", s.Step, s.Method, s.Path, resp.StatusCode, raw, s.Status)
		}
		var obj any = map[string]any{}
		if len(raw) > 0 {
			d := json.NewDecoder(bytes.NewReader(raw))
			d.UseNumber()
			if err := d.Decode(&obj); err != nil {
				t.Fatalf("%s: response %q is not JSON: %v", s.Step, raw, err)
			}
		}
		requireReads(t, s.Step, obj, s.Reads)
		if s.Step == "acquire" {
			if a, _ := field(obj, "acquired"); a != true {
				t.Fatalf("acquire: %v; want acquired true on a fresh name", obj)
			}
		}
		capture(t, vars, obj, s.Captures)
	}
	http.DefaultClient.CloseIdleConnections()
}

func TestRESTReplay(t *testing.T) {
	s := loadShapes(t)
	replayHTTP(t, s.REST, map[string]any{"name": "k6-rest-replay"})
	// The lock is free again: the same steps succeed a second time.
	replayHTTP(t, s.REST, map[string]any{"name": "k6-rest-replay"})
}

// TestReplayWithToken replays the REST and Connect shapes against a
// gateway that requires a bearer token, sending it as the scripts do with
// LEASEGATE_TOKEN set.
func TestReplayWithToken(t *testing.T) {
	const token = "k6-token-0123456789abcdef"
	secured := gwtest.Start(t, etcd, gwtest.Tokens(token+" k6 load"))
	s := loadShapes(t)
	replayHTTPTo(t, secured.URL, token, s.REST, map[string]any{"name": "k6-rest-token"})
	replayHTTPTo(t, secured.URL, token, s.Connect, map[string]any{"name": "k6-connect-token"})
}

func TestConnectReplay(t *testing.T) {
	s := loadShapes(t)
	replayHTTP(t, s.Connect, map[string]any{"name": "k6-connect-replay"})
	replayHTTP(t, s.Connect, map[string]any{"name": "k6-connect-replay"})
}

// TestGRPCReplay does what k6/net/grpc does with reflect: true: it finds
// the service by server reflection, builds the messages from the script's
// JSON with protojson into dynamic messages, opens the server stream for
// Acquire, reads the responses as protojson with unpopulated fields (as k6
// hands them to the script), and releases with a unary call.
func TestGRPCReplay(t *testing.T) {
	s := loadShapes(t)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	conn, err := grpc.NewClient(gw.Addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	files := reflectFiles(ctx, t, conn, s.GRPC.Service)

	method := func(full string) protoreflect.MethodDescriptor {
		svc, name, _ := strings.Cut(full, "/")
		d, err := files.FindDescriptorByName(protoreflect.FullName(svc))
		if err != nil {
			t.Fatalf("reflection does not describe %s: %v", svc, err)
		}
		m := d.(protoreflect.ServiceDescriptor).Methods().ByName(protoreflect.Name(name))
		if m == nil {
			t.Fatalf("reflection: %s has no method %s", svc, name)
		}
		return m
	}
	build := func(md protoreflect.MethodDescriptor, tmpl any, vars map[string]any) *dynamicpb.Message {
		js, err := json.Marshal(fill(t, tmpl, vars))
		if err != nil {
			t.Fatal(err)
		}
		msg := dynamicpb.NewMessage(md.Input())
		if err := protojson.Unmarshal(js, msg); err != nil {
			t.Fatalf("%s: the script's message %s does not parse: %v", md.FullName(), js, err)
		}
		return msg
	}
	asK6 := func(m proto.Message) map[string]any {
		b, err := protojson.MarshalOptions{EmitUnpopulated: true}.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		var out map[string]any
		_ = json.Unmarshal(b, &out)
		return out
	}

	const name = "k6-stream-replay"
	acq := method(s.GRPC.Acquire.Method)
	if !acq.IsStreamingServer() {
		t.Fatalf("%s is not server-streaming; the script opens a Stream", acq.FullName())
	}
	// Someone holds the name first, so the stream must report a queue
	// position before the grant, as it does for contended k6 VUs.
	holder := openAcquire(ctx, t, conn, acq, build(acq, s.GRPC.Acquire.Message, map[string]any{"name": name}))
	first := holder.next(asK6)
	requireReads(t, "holder acquire", first, s.GRPC.Acquire.Reads)
	holderVars := map[string]any{}
	capture(t, holderVars, first, s.GRPC.Acquire.Captures)

	waiter := openAcquire(ctx, t, conn, acq, build(acq, s.GRPC.Acquire.Message, map[string]any{"name": name}))
	queued := waiter.next(asK6)
	if _, ok := queued["queued"]; !ok {
		t.Fatalf("waiter's first message = %v; want a queued position", queued)
	}
	requireReads(t, "queued", queued, s.GRPC.Acquire.QueuedReads)

	rel := method(s.GRPC.Release.Method)
	release := func(vars map[string]any) {
		out := dynamicpb.NewMessage(rel.Output())
		in := build(rel, s.GRPC.Release.Message, vars)
		if err := conn.Invoke(ctx, "/"+s.GRPC.Release.Method, in, out); err != nil {
			t.Fatalf("release: %v", err)
		}
		requireReads(t, "release", asK6(out), s.GRPC.Release.Reads)
	}
	release(holderVars)
	var granted map[string]any
	for granted == nil {
		m := waiter.next(asK6)
		if _, ok := m["granted"]; ok {
			granted = m
		}
	}
	requireReads(t, "waiter acquire", granted, s.GRPC.Acquire.Reads)
	waiter.end(t)
	holder.end(t)
	vars := map[string]any{}
	capture(t, vars, granted, s.GRPC.Acquire.Captures)
	release(vars)
}

type acquireStream struct {
	t      *testing.T
	stream grpc.ClientStream
	md     protoreflect.MethodDescriptor
}

func openAcquire(ctx context.Context, t *testing.T, conn *grpc.ClientConn, md protoreflect.MethodDescriptor, req proto.Message) *acquireStream {
	t.Helper()
	full := "/" + string(md.Parent().FullName()) + "/" + string(md.Name())
	st, err := conn.NewStream(ctx, &grpc.StreamDesc{ServerStreams: true}, full)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.SendMsg(req); err != nil {
		t.Fatal(err)
	}
	if err := st.CloseSend(); err != nil {
		t.Fatal(err)
	}
	return &acquireStream{t: t, stream: st, md: md}
}

func (a *acquireStream) next(asK6 func(proto.Message) map[string]any) map[string]any {
	a.t.Helper()
	msg := dynamicpb.NewMessage(a.md.Output())
	if err := a.stream.RecvMsg(msg); err != nil {
		a.t.Fatalf("acquire stream: %v", err)
	}
	return asK6(msg)
}

// end reads the stream to its end, as k6's 'end' event waits for.
func (a *acquireStream) end(t *testing.T) {
	t.Helper()
	msg := dynamicpb.NewMessage(a.md.Output())
	if err := a.stream.RecvMsg(msg); !errors.Is(err, io.EOF) {
		t.Errorf("acquire stream after the grant: %v, %v; want the stream to end", msg, err)
	}
}

// reflectFiles asks the server for the file defining symbol and its
// dependencies, as k6's reflect option does.
func reflectFiles(ctx context.Context, t *testing.T, conn *grpc.ClientConn, symbol string) *protoregistry.Files {
	t.Helper()
	rc, err := rpb.NewServerReflectionClient(conn).ServerReflectionInfo(ctx)
	if err != nil {
		t.Fatalf("reflection: %v", err)
	}
	defer rc.CloseSend()
	ask := func(req *rpb.ServerReflectionRequest) *rpb.ServerReflectionResponse {
		if err := rc.Send(req); err != nil {
			t.Fatalf("reflection send: %v", err)
		}
		resp, err := rc.Recv()
		if err != nil {
			t.Fatalf("reflection recv: %v", err)
		}
		return resp
	}
	list := ask(&rpb.ServerReflectionRequest{MessageRequest: &rpb.ServerReflectionRequest_ListServices{}})
	var names []string
	for _, s := range list.GetListServicesResponse().GetService() {
		names = append(names, s.GetName())
	}
	if !slices.Contains(names, symbol) {
		t.Fatalf("reflection lists %v; want %s", names, symbol)
	}
	set := &descriptorpb.FileDescriptorSet{}
	seen := map[string]bool{}
	queue := []*rpb.ServerReflectionRequest{{MessageRequest: &rpb.ServerReflectionRequest_FileContainingSymbol{FileContainingSymbol: symbol}}}
	for len(queue) > 0 {
		resp := ask(queue[0])
		queue = queue[1:]
		for _, raw := range resp.GetFileDescriptorResponse().GetFileDescriptorProto() {
			fd := &descriptorpb.FileDescriptorProto{}
			if err := proto.Unmarshal(raw, fd); err != nil {
				t.Fatal(err)
			}
			if seen[fd.GetName()] {
				continue
			}
			seen[fd.GetName()] = true
			set.File = append(set.File, fd)
			for _, dep := range fd.GetDependency() {
				if !seen[dep] {
					queue = append(queue, &rpb.ServerReflectionRequest{MessageRequest: &rpb.ServerReflectionRequest_FileByFilename{FileByFilename: dep}})
				}
			}
		}
	}
	files, err := protodesc.NewFiles(set)
	if err != nil {
		t.Fatalf("reflection descriptors: %v", err)
	}
	return files
}
