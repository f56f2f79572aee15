package gateway

import (
	"errors"
	"fmt"
	"testing"

	"connectrpc.com/connect"

	"github.com/leasegate/leasegate/shard"
)

// A shard's failure is answered unavailable, saying "shard unavailable"
// once, whether or not the router's error says it already.
func TestShardUnavailableSaysItOnce(t *testing.T) {
	breaker := fmt.Errorf("%w: cluster %q: circuit breaker is open", shard.ErrShardUnavailable, "c0")
	for _, tc := range []struct {
		err  error
		want string
	}{
		{shard.Unavailable(breaker), `shard unavailable: cluster "c0": circuit breaker is open`},
		{shard.Unavailable(errors.New(`shard "c1" did not answer in time`)), `shard unavailable: shard "c1" did not answer in time`},
	} {
		ce := toConnect(tc.err)
		if ce.Code() != connect.CodeUnavailable || ce.Message() != tc.want {
			t.Errorf("toConnect(%v) = %s %q; want unavailable %q", tc.err, ce.Code(), ce.Message(), tc.want)
		}
		if !errors.Is(tc.err, shard.ErrShardUnavailable) {
			t.Errorf("%v does not wrap shard.ErrShardUnavailable", tc.err)
		}
	}
}
