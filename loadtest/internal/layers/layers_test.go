package layers

import (
	"bytes"
	"runtime/pprof"
	"testing"
	"time"

	"github.com/google/pprof/profile"
)

func TestClassify(t *testing.T) {
	for _, c := range []struct {
		stack []string
		want  string
	}{
		{[]string{"crypto/sha256.block", "github.com/leasegate/leasegate/queue.NewSecret", "github.com/leasegate/leasegate/gateway.(*Service).Acquire", "connectrpc.com/connect.(*Handler).ServeHTTP", "net/http.(*http2serverConn).runHandler"}, Gateway},
		{[]string{"syscall.Syscall", "net.(*conn).Write", "net/http.(*http2Framer).WriteData", "net/http.(*http2serverConn).writeFrameAsync"}, HTTP},
		{[]string{"syscall.Syscall", "golang.org/x/net/http2.(*Framer).WriteData", "google.golang.org/grpc/internal/transport.(*loopyWriter).run", "google.golang.org/grpc/internal/transport.(*http2Server).HandleStreams"}, EtcdSrv},
		{[]string{"syscall.Syscall", "golang.org/x/net/http2.(*Framer).ReadFrame", "google.golang.org/grpc/internal/transport.(*http2Client).reader"}, EtcdCli},
		{[]string{"google.golang.org/protobuf/proto.Marshal", "go.etcd.io/etcd/api/v3/etcdserverpb.(*TxnRequest).Marshal", "go.etcd.io/etcd/client/v3.(*txn).Commit", "github.com/leasegate/leasegate/queue.(*Engine).enqueue"}, EtcdCli},
		{[]string{"go.etcd.io/bbolt.(*Tx).Commit", "go.etcd.io/etcd/server/v3/storage/backend.(*batchTx).commit"}, EtcdSrv},
		{[]string{"runtime.scanobject", "runtime.gcDrain", "runtime.gcBgMarkWorker"}, GC},
		{[]string{"runtime.memmove", "runtime.gcAssistAlloc", "runtime.mallocgc", "github.com/leasegate/leasegate/client.(*Lock).Release"}, GC},
		{[]string{"runtime.futex", "runtime.schedule", "runtime.mcall"}, Runtime},
		{[]string{"runtime.mallocgc", "github.com/leasegate/leasegate/loadtest/internal/scenario.cycle"}, LoadGen},
		{[]string{"github.com/leasegate/leasegate/client.(*Session).Acquire"}, SDK},
		{[]string{"syscall.Syscall", "net.(*conn).Read", "net/http.(*http2clientConnReadLoop).run", "net/http.(*http2ClientConn).readLoop"}, HTTPCli},
		{[]string{"compress/flate.(*compressor).write", "connectrpc.com/connect.(*duplexHTTPCall).Send", "github.com/leasegate/leasegate/client.(*Client).Acquire"}, HTTPCli},
		{[]string{"net/http.(*persistConn).writeLoop"}, HTTPCli},
		{[]string{"syscall.write", "net.(*conn).Write", "google.golang.org/grpc/internal/transport.(*bufWriter).Flush", "google.golang.org/grpc/internal/transport.(*loopyWriter).run", "google.golang.org/grpc/internal/transport.NewServerTransport.func3"}, EtcdSrv},
		{[]string{"google.golang.org/grpc/internal/transport.(*loopyWriter).run", "google.golang.org/grpc/internal/transport.NewHTTP2Client.func6"}, EtcdCli},
		{[]string{"indexbytebody", "runtime.findnull", "runtime.goexit0", "runtime.mcall"}, Runtime},
		{[]string{"syscall.Syscall6", "os.(*File).Write"}, Unclaimed},
	} {
		if got := Classify(c.stack); got != c.want {
			t.Errorf("Classify(%q) = %q; want %q", c.stack[0]+" … "+c.stack[len(c.stack)-1], got, c.want)
		}
	}
}

//go:noinline
func spin(d time.Duration) int {
	n := 0
	for end := time.Now().Add(d); time.Now().Before(end); {
		n++
	}
	return n
}

// TestRowOf profiles this package's own busy loop and finds it charged to
// the load generator (the package lives under loadtest), divided by the
// operations given.
func TestRowOf(t *testing.T) {
	var buf bytes.Buffer
	if err := pprof.StartCPUProfile(&buf); err != nil {
		t.Skip("CPU profiling unavailable:", err)
	}
	spin(300 * time.Millisecond)
	pprof.StopCPUProfile()
	p, err := profile.Parse(&buf)
	if err != nil {
		t.Fatal(err)
	}
	r := RowOf("spin", p, 10, 0.3)
	if r.TotalUs <= 0 {
		t.Fatalf("row %+v: want CPU", r)
	}
	if r.UsPerOp[LoadGen] < r.TotalUs/2 {
		t.Errorf("row %+v: want most of the CPU in the load generator", r)
	}
	var b bytes.Buffer
	Table(&b, []Row{r}, "ops")
	if !bytes.Contains(b.Bytes(), []byte("| spin | 10 |")) {
		t.Errorf("table:\n%s", b.String())
	}
}

// TestSides checks the fold of a session cycle's layers: the runtime's
// share goes to each side in proportion to its own CPU.
func TestSides(t *testing.T) {
	r := Row{UsPerOp: map[string]float64{SDK: 10, HTTP: 40, Gateway: 20, EtcdCli: 20, EtcdSrv: 10, GC: 50}}
	got := Sides(r)
	want := map[string]float64{SideClient: 15, SideGateway: 120, SideEtcd: 15}
	for s, v := range want {
		if d := got[s] - v; d > 1e-9 || d < -1e-9 {
			t.Errorf("Sides(%v)[%s] = %v; want %v", r.UsPerOp, s, got[s], v)
		}
	}
}
