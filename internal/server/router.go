package server

import (
	"github.com/leasegate/leasegate/gateway"
)

func newRouter(targets []gateway.Target) (gateway.Router, error) {
	return gateway.SingleRouter{T: targets[0]}, nil
}
