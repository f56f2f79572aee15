package etcdtest

import (
	"context"
	"testing"
	"time"
)

func TestStartPutGetRestart(t *testing.T) {
	c := Start(t)
	cli := c.Client()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := cli.Put(ctx, "k", "v"); err != nil {
		t.Fatal(err)
	}
	c.Restart()
	resp, err := cli.Get(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Kvs) != 1 || string(resp.Kvs[0].Value) != "v" {
		t.Fatalf("Get(k) after restart = %v; want v", resp.Kvs)
	}
}
