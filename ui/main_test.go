package ui_test

import (
	"os"
	"testing"

	"github.com/leasegate/leasegate/internal/etcdtest"
)

var shared *etcdtest.Cluster

func TestMain(m *testing.M) {
	os.Exit(etcdtest.Main(m, func(c *etcdtest.Cluster) { shared = c }))
}
