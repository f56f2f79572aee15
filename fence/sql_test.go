package fence_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/leasegate/leasegate/fence"
)

func TestSQLConfigValidate(t *testing.T) {
	good := fence.DefaultSQLConfig(fence.SQLite)
	if err := good.Validate(); err != nil {
		t.Fatalf("DefaultSQLConfig(SQLite).Validate() = %v; want nil", err)
	}
	for _, tc := range []struct {
		name   string
		mutate func(*fence.SQLConfig)
		want   string // in the message
	}{
		{"no dialect", func(c *fence.SQLConfig) { c.Dialect = 0 }, "Dialect Dialect(0)"},
		{"unknown dialect", func(c *fence.SQLConfig) { c.Dialect = 7 }, "Dialect Dialect(7)"},
		{"injection", func(c *fence.SQLConfig) { c.Table = "t; DROP TABLE x" }, `Table "t; DROP TABLE x"`},
		{"quoted", func(c *fence.SQLConfig) { c.Table = `"t"` }, `Table "\"t\""`},
		{"empty table", func(c *fence.SQLConfig) { c.Table = "" }, `Table ""`},
		{"three parts", func(c *fence.SQLConfig) { c.Table = "a.b.c" }, `Table "a.b.c"`},
		{"long", func(c *fence.SQLConfig) { c.Table = strings.Repeat("t", 64) }, "at most 63 bytes"},
		{"negative busy", func(c *fence.SQLConfig) { c.BusyTimeout = -time.Second }, "BusyTimeout -1s"},
		{"huge busy", func(c *fence.SQLConfig) { c.BusyTimeout = 25 * time.Hour }, "BusyTimeout 25h0m0s"},
	} {
		c := good
		tc.mutate(&c)
		err := c.Validate()
		if !errors.Is(err, fence.ErrInvalidConfig) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: Validate() = %v; want ErrInvalidConfig mentioning %s", tc.name, err, tc.want)
		}
	}
	for _, ok := range []string{"fence_tokens", "public.fence_tokens", "_t1"} {
		c := good
		c.Table = ok
		if err := c.Validate(); err != nil {
			t.Errorf("Validate() with Table %q = %v; want nil", ok, err)
		}
	}
}
