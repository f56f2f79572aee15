package gateway_test

import "strings"

// hopLayers split the HTTP and Connect layers of cpulayers_test.go's
// layers into the parts a multiplexed stream would and would not save,
// the gateway's interceptors and edge into one layer each, and the
// scheduler out of the runtime; the rest is as there. The innermost frame
// that a layer owns decides, so protobuf and HPACK, which own nothing
// there, are charged here to themselves when the wire called them.
var hopLayers = append([]layer{
	// The whole process's: a wake-up the hop adds shows as this layer's
	// difference from the fleet's.
	{"scheduler: park, wake, spawn (every goroutine)", prefixed("runtime.schedule", "runtime.findRunnable", "runtime.park_m",
		"runtime.gopark", "runtime.goready", "runtime.ready", "runtime.newproc", "runtime.goexit0", "runtime.wakep",
		"runtime.startm", "runtime.stopm", "runtime.notesleep", "runtime.notewakeup", "runtime.netpoll", "runtime.futex",
		"runtime.runqsteal", "runtime.stealWork", "runtime.resetspinning", "runtime.mPark", "runtime.usleep", "runtime.osyield")},
	{"HPACK (header encoding)", func(fn, stack string) bool {
		return strings.Contains(fn, "hpack.") && !strings.Contains(stack, "google.golang.org/grpc")
	}},
	{"protobuf, wire codec", func(fn, stack string) bool {
		// The gateway's handler runs under Connect's frames: its etcd
		// client's messages are the etcd client's.
		return strings.HasPrefix(fn, "google.golang.org/protobuf") && strings.Contains(stack, "connectrpc.com/connect") &&
			!strings.Contains(stack, "google.golang.org/grpc") && !strings.Contains(stack, "go.etcd.io/")
	}},
	{"interceptor: error translation", prefixed(lg+"gateway.errorTranslator", lg+"gateway.toConnect", lg+"gateway.classify",
		lg+"gateway.addDetail", lg+"gateway.named", lg+"gateway.limitedToConnect")},
	{"interceptor: rate limits", prefixed(lg+"gateway.(*limiter)", lg+"gateway.rateLimit", "golang.org/x/time/rate")},
	{"edge: auth", prefixed(lg+"gateway.(*Authenticator)", lg+"gateway.(*Service).caller", lg+"gateway.IdentityFrom", lg+"gateway.WithIdentity")},
	{"edge: CORS, deadlines, routing", prefixed(lg+"gateway.(*Service).edge", lg+"gateway.checkEncodings", lg+"gateway.isPublic",
		lg+"gateway.(*deadlineBody)", lg+"gateway.(*flushWriter)", lg+"gateway.loopbackHost", lg+"gateway.(*Service).routePublic",
		"github.com/rs/cors")},
	{"Connect protocol + envelope, gateway side", func(fn, stack string) bool {
		return strings.HasPrefix(fn, "connectrpc.com/connect") && httpServer(stack)
	}},
	{"HTTP/2 framing, flow control, streams, gateway side", func(fn, stack string) bool {
		return http2Frame(fn) && httpServer(stack)
	}},
	{"net/http request + response, gateway side", func(fn, stack string) bool {
		return strings.HasPrefix(fn, "net/http.") && httpServer(stack)
	}},
	{"Connect protocol + envelope, caller side", prefixed("connectrpc.com/connect")},
	{"HTTP/2 framing, flow control, streams, caller side", func(fn, _ string) bool { return http2Frame(fn) }},
	{"net/http request + response, caller side", prefixed("net/http.")},
}, layers...)

// http2Frame reports whether fn is net/http's bundled HTTP/2 (its
// functions and methods are net/http.http2…, net/http.(*http2…).…).
func http2Frame(fn string) bool {
	return strings.HasPrefix(fn, "net/http.http2") || strings.HasPrefix(fn, "net/http.(*http2") || strings.HasPrefix(fn, "net/http.(http2")
}
